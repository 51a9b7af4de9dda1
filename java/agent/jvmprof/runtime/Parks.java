package jvmprof.runtime;

import java.util.concurrent.locks.AbstractQueuedLongSynchronizer;
import java.util.concurrent.locks.AbstractQueuedSynchronizer;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.StampedLock;

/**
 * Lock mode's probe for java.util.concurrent: while a lock session runs, the agent rewrites
 * LockSupport's park methods so that each calls {@link #parked} on every exit (normal or
 * exceptional) with the blocker and the System.nanoTime() taken at entry.
 *
 * <p>Cheap when off or short: one volatile read, then one nanoTime and a compare. Only a park at
 * least as long as the threshold, with a blocker, reaches the agent's native {@link #record},
 * which takes the thread's stack. This class must never park or take a j.u.c lock itself (it
 * runs inside LockSupport) and has no nested classes (the agent defines it alone in the boot
 * loader).
 *
 * <p>Only parks that began after the session started count. A park that began in an earlier
 * session's rewritten LockSupport (now an obsolete method version, still on the thread's stack)
 * and ends in a later session would otherwise report the whole time in between, and with a
 * stack whose park frame the agent does not recognise as its own (an obsolete method has its
 * own method ID): a thread deep in a ReentrantLock's queue can stay parked for seconds.
 */
public final class Parks {
    private Parks() {}

    private static volatile boolean enabled;
    /** System.nanoTime() when the running session started. */
    private static volatile long sinceNanos;
    private static volatile long thresholdNanos;

    /** Called by the agent when a lock session starts. Returns 0. */
    public static int enable(long threshold) {
        thresholdNanos = threshold;
        sinceNanos = System.nanoTime();
        enabled = true;
        return 0;
    }

    /** Called by the agent when the session stops. Returns 0. */
    public static int disable() {
        enabled = false;
        return 0;
    }

    /**
     * On every exit of an instrumented LockSupport park method. {@code blocker} is the method's
     * blocker argument, or null for park(), parkNanos(long) and parkUntil(long), whose blocker
     * (if any) was set with LockSupport.setCurrentBlocker (e.g. by Condition.await).
     */
    public static void parked(Object blocker, long startNanos) {
        if (!enabled || startNanos - sinceNanos < 0) {
            return;
        }
        long ns = System.nanoTime() - startNanos;
        if (ns < thresholdNanos) {
            return;
        }
        if (blocker == null) {
            blocker = LockSupport.getBlocker(Thread.currentThread());
            if (blocker == null) {
                return;
            }
        }
        // A thread waiting to acquire a synchronizer (ReentrantLock, ReentrantReadWriteLock,
        // Semaphore, any AQS-based lock, StampedLock) is contention; everything else that parks
        // with a blocker (Condition.await, FutureTask.get, idle pool threads, queues) waits.
        boolean lock = blocker instanceof AbstractQueuedSynchronizer
                || blocker instanceof AbstractQueuedLongSynchronizer
                || blocker instanceof StampedLock;
        record(blocker, ns, !lock);
    }

    /** Registered by the agent (RegisterNatives): records one park on the calling thread. */
    private static native void record(Object blocker, long ns, boolean isWait);
}
