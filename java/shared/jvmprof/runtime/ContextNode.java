package jvmprof.runtime;

/**
 * One calling context of a thread's calling-context tree, shared by every runtime: the offline
 * one (OfflineProbes), the agent's exact mode (Probes) and root-method profiling (Roots), each
 * of which extends it with its own counters and its thread's bookkeeping.
 *
 * <p>A context keeps its children by method id in an open-addressing table, replaced as a whole
 * when it grows, and remembers the child it found last, so a method calling the same callee
 * again finds it with one compare. Only the thread that owns the tree writes it; a reader on
 * another thread (the agent, a shutdown hook) sees it racily, which only makes a live view
 * slightly stale.
 *
 * <p>Past a runtime's node budget ({@link #reserve} says no) a context gets one SPILL child,
 * which stands for every call it makes from then on; what a spill context's callees are is the
 * runtime's choice ({@link #spillCallee}). So a call past the budget allocates nothing.
 *
 * <p>Self-contained like the runtimes: no JDK method the agent may instrument, no lambdas.
 * Its members are public or protected, not package-private: an offline-instrumented
 * application run under the agent gets this class from the boot loader and OfflineProbes from
 * its own, so they are not in one runtime package.
 */
public abstract class ContextNode {
    /** Method id of the contexts that stand for calls past the node budget. */
    public static final int SPILL = -2;

    public final int method;
    public long calls;
    public long bytecodes;
    /** Children by method id: open addressing, replaced as a whole when it grows. */
    public ContextNode[] kids;
    /** Number of children (a runtime may give its spill contexts another use of it). */
    public int size;
    /** The method id of the child found last (-3: none; real ids are at least -5). */
    private int lastKey = -3;
    private ContextNode lastKid;

    protected ContextNode(int method) {
        this.method = method;
    }

    /** Takes one node of the budget for a new child; false once the budget is spent. */
    protected abstract boolean reserve();

    /** A new child of this context for method id (SPILL for the spill child). */
    protected abstract ContextNode newChild(int id);

    /** The context of a call made in this spill context (not cached). */
    protected abstract ContextNode spillCallee();

    /** The context of a call of method id made in this one, created if new. */
    public final ContextNode child(int id) {
        if (lastKey == id) return lastKid;
        return miss(id);
    }

    private ContextNode miss(int id) {
        // A spill context never caches: its callees are the runtime's to say.
        if (method == SPILL) return spillCallee();
        ContextNode c = find(id);
        if (c == null) c = add(id);
        lastKey = id;
        lastKid = c;
        return c;
    }

    /** The child for method id, or null. */
    public final ContextNode find(int id) {
        ContextNode[] t = kids;
        if (t == null) return null;
        int mask = t.length - 1;
        for (int i = (id * 0x9E3779B9) >>> 16 & mask; ; i = (i + 1) & mask) {
            ContextNode n = t[i];
            if (n == null) return null;
            if (n.method == id) return n;
        }
    }

    private ContextNode add(int id) {
        if (!reserve()) {
            // Past the node budget: the one spill child of this context (created once).
            ContextNode s = find(SPILL);
            if (s == null) {
                s = newChild(SPILL);
                insert(s);
            }
            return s;
        }
        ContextNode c = newChild(id);
        insert(c);
        return c;
    }

    private void insert(ContextNode c) {
        ContextNode[] t = kids;
        if (t == null || (size + 1) * 2 > t.length) {
            ContextNode[] g = new ContextNode[t == null ? 4 : t.length * 2];
            if (t != null) for (ContextNode n : t) if (n != null) put(g, n);
            put(g, c);
            kids = g;
        } else {
            put(t, c);
        }
        size++;
    }

    private static void put(ContextNode[] t, ContextNode n) {
        int mask = t.length - 1;
        int i = (n.method * 0x9E3779B9) >>> 16 & mask;
        while (t[i] != null) i = (i + 1) & mask;
        t[i] = n;
    }
}
