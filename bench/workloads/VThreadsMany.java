import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Many live virtual threads for bench/vthreads: THREADS virtual threads, each looping for
 * SECONDS: sleep 50-150 ms, then a little work (about 20 us). Prints "wakeups N" at the end.
 * Usage: java VThreadsMany [THREADS] [SECONDS]
 */
public class VThreadsMany {
    static final AtomicLong WAKEUPS = new AtomicLong();

    static long work(long x) {
        for (int i = 0; i < 20_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        int threads = args.length > 0 ? Integer.parseInt(args[0]) : 100_000;
        long seconds = args.length > 1 ? Long.parseLong(args[1]) : 20;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Thread[] all = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            all[i] = Thread.ofVirtual().start(() -> {
                long x = 1;
                try {
                    while (System.nanoTime() < end) {
                        Thread.sleep(ThreadLocalRandom.current().nextLong(50, 151));
                        x = work(x);
                        WAKEUPS.incrementAndGet();
                    }
                } catch (InterruptedException e) {
                    return;
                }
                if (x == 42) {
                    System.out.println(x);
                }
            });
        }
        for (Thread t : all) {
            t.join();
        }
        System.out.println("wakeups " + WAKEUPS.get());
    }
}
