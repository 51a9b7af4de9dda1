import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Virtual threads that stay put, for thread dumps: ROOT threads "idle-root-N" started with
 * Thread.ofVirtual() (the root container) sleep in sleepForever(), and EXEC tasks of a
 * virtual-thread-per-task executor (a container of its own) park on a lock main holds, in
 * waitForLock(). Prints "ready" once every thread is in place, then waits to be killed.
 * Usage: java VThreadsIdle [ROOT] [EXEC]
 */
public class VThreadsIdle {
    static final ReentrantLock LOCK = new ReentrantLock();

    static void sleepForever() {
        try {
            Thread.sleep(600_000);
        } catch (InterruptedException e) {
            // end
        }
    }

    static void waitForLock() {
        LOCK.lock();
        LOCK.unlock();
    }

    public static void main(String[] args) throws Exception {
        int root = args.length > 0 ? Integer.parseInt(args[0]) : 5;
        int exec = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        LOCK.lock();
        for (int i = 0; i < root; i++) {
            Thread.ofVirtual().name("idle-root-" + i).start(VThreadsIdle::sleepForever);
        }
        ExecutorService executor = Executors.newVirtualThreadPerTaskExecutor();
        for (int i = 0; i < exec; i++) {
            executor.submit(VThreadsIdle::waitForLock);
        }
        while (LOCK.getQueueLength() < exec) {
            Thread.sleep(10);
        }
        Thread.sleep(200);
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(600_000);
    }
}
