package jvmprof.runtime;

import static jvmprof.runtime.Roots.*;
import static jvmprof.runtime.TraceRing.*;
import static jvmprof.runtime.TraceTrees.*;

import jvmprof.runtime.Roots.Node;

/**
 * Root-method profiling's activations (see Roots): entering one below a root (revealing the
 * method's callees first if it is new), leaving it with its times corrected for the probes'
 * own cost (JFluid), unwinding frames that left without their exit, and, under a minimum
 * latency, keeping or dropping a root invocation's numbers when it ends. In trace mode an
 * activation's entry and exit are logged instead of timed.
 */
final class Activations {
    private Activations() {}

    @jdk.internal.vm.annotation.DontInline
    static Node push(RootThread t, int id) {
        boolean[] r = revealed;
        if (id >= 0 && !trace && (id >= r.length || !r[id])) revealNow(t, id);
        Node n = enter(t, id);
        int d = t.depth;
        if (trace) {
            t.logged[d] = logEntry(t, id, d);
        } else {
            t.start[d] = now();
        }
        return n;
    }

    /**
     * A new activation on t's stack, neither timed nor logged yet: the context of method id
     * below the current activation (below the thread's top outside every root).
     */
    static Node enter(RootThread t, int id) {
        int d = t.depth + 1;
        if (d == t.stack.length) t.grow();
        Node parent = d == 1 ? t.top : t.stack[d - 1];
        Node n = (Node) parent.child(id);
        t.stack[d] = n;
        t.child[d] = 0;
        t.below[d] = 0;
        t.depth = d;
        return n;
    }

    /**
     * Trace mode: logs an activation's entry with its time if the ring has room for it. A call
     * that finds none is dropped whole and never reads the clock (trace mode's tree counts
     * calls; their times are the events').
     */
    static boolean logEntry(RootThread t, int id, int d) {
        long head = ((long) id & 0xFFFFFFFFL) << TAG_BITS;
        long tree = 0;
        int need = 2;
        if (d == 1) {
            tree = openTree(t);
            if (t.inherited == 0) {
                // The thread's own tree: its number rides in the entry (no event of its own).
                head |= (long) t.trees << TREE_SHIFT;
            } else {
                need = 3;
            }
        }
        if (!room(t, t.loggedOpen + need)) {
            t.dropped++;
            return false;
        }
        put(t, head, now());
        t.loggedOpen++;
        if (need == 3) put(t, CONTEXT, tree);
        return true;
    }

    static void revealNow(RootThread t, int id) {
        long a = now();
        reveal(id);
        boolean[] r = revealed;
        if (id < r.length) r[id] = true;
        shift(t, now() - a);
    }

    /** Takes a pause (revealing, instrumenting) out of every activation on the stack. */
    static void shift(RootThread t, long pause) {
        for (int k = 1; k <= t.depth; k++) t.start[k] += pause;
    }

    @jdk.internal.vm.annotation.DontInline
    static void leave(Node n, long bytecodes) {
        if (n.method == TASK) {
            endTask(n.t);
            return;
        }
        long end = trace ? 0 : now();
        RootThread t = n.t;
        int d = t.depth;
        if (d == 0) return;
        if (t.stack[d] != n) {
            // Frames that left without their exit (a constructor without an exit handler):
            // closed now, at this time.
            int k = d;
            while (k > 0 && t.stack[k] != n) k--;
            if (k == 0) return;
            while (t.depth > k) pop(t, end, 0);
        }
        pop(t, end, bytecodes);
    }

    static void pop(RootThread t, long end, long bytecodes) {
        int d = t.depth;
        Node n = t.stack[d];
        if (trace) {
            // Calls only: the times are the events'.
            t.stack[d] = null;
            t.depth = d - 1;
            if (t.logged[d]) {
                t.logged[d] = false;
                t.loggedOpen--;
                log(t, EXIT, now(), 1, false);
            }
            // The tree ends: the thread is back in the tree of the task it runs, if any.
            if (d == 1) publish(t, t.inherited);
            t.calls++;
            n.calls++;
            return;
        }
        long below = t.below[d];
        long incl = end - t.start[d] - ((inner256 + below * (inner256 + outer256)) >> 8);
        long self = incl - t.child[d];
        t.stack[d] = null;
        t.depth = d - 1;
        if (d > 1) {
            t.child[d - 1] += incl;
            t.below[d - 1] += below + 1;
        }
        t.calls++;
        if (minLatency == 0) {
            n.calls++;
            n.selfNs += self;
            n.bytecodes += bytecodes;
            n.inclNs += incl;
            n.inclSq += (double) incl * (double) incl;
            if (incl < n.min) n.min = incl;
            if (incl > n.max) n.max = incl;
        } else {
            if (n.epoch != t.epoch) t.touch(n);
            n.pCalls++;
            n.pSelf += self;
            n.pBytecodes += bytecodes;
            n.pIncl += incl;
            n.pSq += (double) incl * (double) incl;
            if (incl < n.pMin) n.pMin = incl;
            if (incl > n.pMax) n.pMax = incl;
            if (d == 1) finishRoot(t, incl >= minLatency);
        }
    }

    /** The end of a root invocation under a minimum latency: keep its numbers or drop them. */
    static void finishRoot(RootThread t, boolean keep) {
        for (int i = 0; i < t.nTouched; i++) {
            Node n = t.touched[i];
            t.touched[i] = null;
            if (keep) {
                n.calls += n.pCalls;
                n.selfNs += n.pSelf;
                n.bytecodes += n.pBytecodes;
                n.inclNs += n.pIncl;
                n.inclSq += n.pSq;
                if (n.pMin < n.min) n.min = n.pMin;
                if (n.pMax > n.max) n.max = n.pMax;
            }
            n.pCalls = 0;
            n.epoch = 0;
        }
        t.nTouched = 0;
        t.epoch++;
    }
}
