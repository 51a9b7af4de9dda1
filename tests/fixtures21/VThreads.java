import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Ground truth for virtual threads (Java 21): THREADS virtual threads of four kinds, all started
 * at once, each measuring the time it really spent, and at the end per kind:
 *   wall <kind> <ns>   the sum over its threads of (end - start) of the task, System.nanoTime()
 *   cpu <kind> <ns>    (spinA, spinB) the CPU time its threads used: each stretch between two
 *                      yields runs on one carrier, measured by the carrier's own CPU clock
 *   threads <kind> <n> how many threads of the kind ran
 * Kinds, one task method each (a profile finds the kind by that frame):
 *   spinA    CPU-bound: CHUNKS chunks of burn(), Thread.yield() after each (so it waits for a
 *            carrier between chunks, runnable and unmounted)
 *   spinB    the same with 2 x CHUNKS chunks
 *   sleeper  sleeps 25 ms, 10 times
 *   locker   takes one ReentrantLock shared by all lockers (parked while it waits), and
 *            holds it while it sleeps 0.3 ms
 * The threads are split 10 % spinA, 10 % spinB, 50 % sleeper, 30 % locker.
 * Needs `--add-opens java.base/java.lang=ALL-UNNAMED` (the carrier of the current thread).
 * Usage: java VThreads [THREADS] [CHUNKS]
 */
public class VThreads {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    static final ReentrantLock LOCK = new ReentrantLock();
    static final AtomicLong SINK = new AtomicLong();
    static final String[] KINDS = {"spinA", "spinB", "sleeper", "locker"};
    static final AtomicLong[] WALL = new AtomicLong[4];
    static final AtomicLong[] CPU = new AtomicLong[4];
    static final AtomicLong[] COUNT = new AtomicLong[4];
    static Method currentCarrier;

    static long burn(int n, long x) {
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    /** The CPU time of the carrier this virtual thread is mounted on now (ns). */
    static long carrierCpu() throws Exception {
        Thread carrier = (Thread) currentCarrier.invoke(null);
        return MX.getThreadCpuTime(carrier.threadId());
    }

    static long spin(int kind, int chunks) throws Exception {
        long x = kind;
        for (int c = 0; c < chunks; c++) {
            long before = carrierCpu();
            x = burn(2_000_000, x);
            CPU[kind].addAndGet(carrierCpu() - before);
            Thread.yield();
        }
        return x;
    }

    static long spinA(int chunks) throws Exception {
        return spin(0, chunks);
    }

    static long spinB(int chunks) throws Exception {
        return spin(1, 2 * chunks);
    }

    static long sleeper() throws Exception {
        for (int i = 0; i < 10; i++) {
            Thread.sleep(25);
        }
        return 1;
    }

    static long locker() throws Exception {
        LOCK.lock();
        try {
            Thread.sleep(Duration.ofNanos(300_000));
        } finally {
            LOCK.unlock();
        }
        return 3;
    }

    static void task(int kind, int chunks) {
        long start = System.nanoTime();
        try {
            long x = switch (kind) {
                case 0 -> spinA(chunks);
                case 1 -> spinB(chunks);
                case 2 -> sleeper();
                default -> locker();
            };
            SINK.addAndGet(x);
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
        WALL[kind].addAndGet(System.nanoTime() - start);
        COUNT[kind].incrementAndGet();
    }

    public static void main(String[] args) throws Exception {
        int threads = args.length > 0 ? Integer.parseInt(args[0]) : 10_000;
        int chunks = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        currentCarrier = Thread.class.getDeclaredMethod("currentCarrierThread");
        currentCarrier.setAccessible(true);
        for (int k = 0; k < 4; k++) {
            WALL[k] = new AtomicLong();
            CPU[k] = new AtomicLong();
            COUNT[k] = new AtomicLong();
        }
        // Warm up burn() so that both spin kinds run the same compiled code.
        for (int i = 0; i < 200; i++) {
            SINK.addAndGet(burn(2_000_000, i));
        }
        List<Thread> all = new ArrayList<>(threads);
        for (int i = 0; i < threads; i++) {
            int slot = i % 10;
            int kind = slot == 0 ? 0 : slot == 1 ? 1 : slot < 7 ? 2 : 3;
            all.add(Thread.ofVirtual().name("vt-" + KINDS[kind] + "-" + i).start(() -> task(kind, chunks)));
        }
        for (Thread t : all) {
            t.join();
        }
        for (int k = 0; k < 4; k++) {
            System.out.println("wall " + KINDS[k] + " " + WALL[k].get());
            System.out.println("threads " + KINDS[k] + " " + COUNT[k].get());
            if (k < 2) {
                System.out.println("cpu " + KINDS[k] + " " + CPU[k].get());
            }
        }
    }
}
