package jvmprof.runtime;

/**
 * The runtime that code rewritten by the jvmprof agent in exact mode calls (the offline runtime,
 * java/offline/jvmprof/runtime/OfflineProbes.java, has the same probe signatures). It is put
 * on the boot class path by the agent, so application and JDK classes can both call it.
 *
 * Each thread builds its own calling-context tree (JP, Binder and Hulaas) of ContextNodes
 * (java/shared). Rewritten code keeps its context in a local: {@code node = open(id)}
 * descends from the thread's current context to the child for method id and counts an
 * invocation; the method sums its executed bytecodes
 * in a long local and hands them over with {@code count(node, n)} before each call and
 * {@code close(node, n)} on every normal and exceptional exit, which also makes the caller's
 * context current again; {@code restore(node)} at the start of each exception handler makes
 * the catching frame's context current whatever happened in between. So the hot path is one
 * thread lookup per call, a hit in the thread's context cache and field updates on nodes the
 * thread owns: no lock, no shared write, and no reference store (the current context is an
 * index, so no GC write barrier).
 * Past the node budget calls still count, under a "[past node budget]" child of the last kept
 * context (see SPILL), and allocate nothing. Counters are 64-bit, so they never overflow; the
 * agent reads the trees (racily while threads run, which only makes a live view slightly stale)
 * through threads(), threadName(i) and tree(i). Trees of finished threads are kept.
 *
 * This class must stay self-contained: it runs inside instrumented JDK code, so it calls no JDK
 * method that the agent may instrument (only ThreadLocal, Thread and System.arraycopy, which the
 * agent never rewrites), uses no lambdas and its static initializer does nothing but allocate.
 */
public final class Probes {
    private Probes() {}

    /**
     * Past the node budget each kept context gets at most one SPILL child (ContextNode.SPILL;
     * outside the budget, so at most as many as kept contexts), which counts the calls it made
     * once the budget was spent, whatever their method; calls below those go to a per-thread
     * chain with one node per depth (see {@link Root#deeper}), folded into the child they came
     * from. So a call past the budget allocates nothing, kept contexts' counts stay exact and
     * the totals stay complete.
     */
    static final int SPILL = ContextNode.SPILL;

    /** One calling context (its children: ContextNode). */
    public static final class Node extends ContextNode {
        final Root root;
        /** This node's place in its thread's table (and its hash in the thread's cache). */
        final int index;
        /**
         * The parent's index in the thread's table (an index, not a Node, so that close moves
         * the current context without a reference load). Final but for the first node of a
         * thread's spill chain, re-parented as it is reused. (A spill node's size is its depth
         * below the last kept context.)
         */
        int up;

        Node(int method, Node parent, Root root) {
            super(method);
            this.root = root;
            this.up = parent == null ? 0 : parent.index;
            this.index = root.register(this);
        }

        @Override
        protected boolean reserve() {
            return root.reserveNode();
        }

        @Override
        protected ContextNode newChild(int id) {
            return new Node(id, this, root);
        }

        /** A spill node's callee is the next node of the thread's chain. */
        @Override
        protected ContextNode spillCallee() {
            return root.deeper(this);
        }
    }

    /** A thread's tree and where the thread is in it. */
    static final class Root {
        final Thread thread;
        final String name;
        final Node top;
        /**
         * Index in table of the current context. An int, not a Node: open and close move it on
         * every call, and a reference store into this (old) object costs G1's post-write
         * barrier with its StoreLoad fence, which made up most of the probes' cost.
         */
        int cur;
        /** Every node of this thread, by index (grown by copying). */
        Node[] table = new Node[64];
        int tableSize;
        /** Node budget this thread reserved and has not used yet. */
        int budget;
        /**
         * Calls below a spill node, one node per depth (index 1 is the spill node's callee):
         * bounded by the thread's stack depth. Their counts belong to chain[1]'s parent and are
         * moved there when the chain is taken over by another spill node.
         */
        Node[] chain = new Node[8];
        /**
         * Contexts by (parent, method) hash: most calls find their context here with no write
         * (a node's last-child cache alone missed 64 % of H2's calls, since a method calls
         * several others in turn). Only this thread writes it, and a hit is checked against the
         * node's own parent and the method it was stored for (keys), so a stale entry is never
         * wrong.
         */
        Node[] cache = new Node[64];
        /**
         * The method id each cache entry was stored for. The entry's own method would not do:
         * past the node budget one spill node stands for every callee of its parent, and so does
         * each node of the spill chain below it; checked against the node's method, each of
         * those calls (46 % of the full javac benchmark's) took the slow path.
         */
        int[] keys = new int[64];
        /** Misses since the cache last grew. */
        int misses;

        /** A cache miss: the child from the parent's table (created if new), cached. */
        Node enter(int parent, int id, int slot) {
            Node c = (Node) table[parent].child(id);
            Node[] k = cache;
            if (++misses > 2 * k.length && k.length < CACHE) {
                // Grows (and starts empty) only for threads that miss a lot: a short-lived
                // thread's tree, kept after it ends, keeps only a small cache with it.
                cache = k = new Node[k.length * 2];
                keys = new int[k.length];
                misses = 0;
                slot = slot(parent, id, k);
            }
            k[slot] = c;
            keys[slot] = id;
            return c;
        }

        Root(Thread thread) {
            this.thread = thread;
            this.name = thread.getName();
            this.top = new Node(-1, null, this);
            this.cur = top.index;
        }

        boolean reserveNode() {
            if (budget > 0) {
                budget--;
                return true;
            }
            if (full) return false;
            synchronized (LOCK) {
                int n = maxNodes - nodes < CHUNK ? maxNodes - nodes : CHUNK;
                if (n <= 0) {
                    full = true;
                    return false;
                }
                nodes += n;
                budget = n - 1;
                return true;
            }
        }

        int register(Node n) {
            if (tableSize == table.length) {
                Node[] g = new Node[table.length * 2];
                System.arraycopy(table, 0, g, 0, tableSize);
                table = g;
            }
            table[tableSize] = n;
            return tableSize++;
        }

        /** The chain node for a call made in spill node from. */
        Node deeper(Node from) {
            int k = from.size + 1;
            if (k >= chain.length) {
                Node[] g = new Node[chain.length * 2];
                System.arraycopy(chain, 0, g, 0, chain.length);
                chain = g;
            }
            Node c = chain[k];
            if (c == null) {
                c = new Node(SPILL, from, this);
                c.size = k;
                chain[k] = c;
            } else if (c.up != from.index) {
                // Only chain[1] changes parents (a deeper node's parent is the one above it).
                flushChain();
                c.up = from.index;
            }
            return c;
        }

        /** Moves the chain's counts to the spill node it hangs from. */
        private void flushChain() {
            Node owner = table[chain[1].up];
            for (int k = 1; k < chain.length && chain[k] != null; k++) {
                Node c = chain[k];
                owner.calls += c.calls;
                owner.bytecodes += c.bytecodes;
                c.calls = 0;
                c.bytecodes = 0;
            }
        }
    }

    private static final ThreadLocal<Root> CURRENT = new ThreadLocal<Root>();
    private static final Object LOCK = new Object();
    private static Root[] roots = new Root[16];
    private static int rootCount;
    private static Root[] frozen = new Root[0];
    /** Node budget handed out to threads (under LOCK), in chunks so that few nodes lock. */
    private static int nodes;
    private static int maxNodes = 1 << 22;
    private static final int CHUNK = 256;
    /**
     * Most entries of a thread's context cache (a power of two; 8 KiB with compressed oops).
     * It starts at 64 and doubles when a thread's misses exceed twice its size.
     */
    static final int CACHE = 2048;
    /** Set once the budget is spent (racy: a thread that misses it takes the lock once more). */
    private static boolean full;

    /**
     * Roots by thread id modulo the table size: a cache in front of the ThreadLocal. Racy on
     * purpose and still safe: a thread uses an entry only if the entry's (final) thread is itself,
     * and then the entry is the Root it created. Entries are written once per thread (again only
     * when two threads collide), so the table is read-mostly and stays in every core's cache.
     */
    private static final Root[] BY_ID = new Root[4096];

    private static Root root() {
        Thread t = Thread.currentThread();
        int slot = (int) t.getId() & (BY_ID.length - 1);
        Root r = BY_ID[slot];
        if (r != null && r.thread == t) return r;
        r = slowRoot(t);
        BY_ID[slot] = r;
        return r;
    }

    private static Root slowRoot(Thread t) {
        Root r = CURRENT.get();
        if (r == null) {
            r = new Root(t);
            synchronized (LOCK) {
                if (rootCount == roots.length) {
                    Root[] g = new Root[roots.length * 2];
                    System.arraycopy(roots, 0, g, 0, rootCount);
                    roots = g;
                }
                roots[rootCount++] = r;
            }
            CURRENT.set(r);
        }
        return r;
    }

    /** Where the context of method id under context parent goes in the thread's cache k. */
    private static int slot(int parent, int id, Node[] k) {
        return (parent * 0x9E3779B9 + id) & (k.length - 1);
    }

    /**
     * Method entry: the context of method id under the thread's current one, counted. Never
     * inlined: inlined at every call site of every compiled method, its thread lookup, cache
     * check and slow path made C2 do about three times its usual work on javac (C2 took as
     * much CPU as javac itself); as a call, javac's exact run took 55 s instead of 65 s, H2's
     * the same. (count, close and restore are a field update or two and stay inlinable.)
     */
    @jdk.internal.vm.annotation.DontInline
    public static Node open(int id) {
        Root r = root();
        int cur = r.cur;
        Node[] k = r.cache;
        int slot = slot(cur, id, k);
        Node c = k[slot];
        // Indices are unique per thread, so the parent's index identifies the parent. Which
        // child a parent has for a method never changes, except that the spill chain's first
        // node moves between spill nodes: the parent check sends it to the slow path, which
        // moves it back (and its counts to the spill node it leaves).
        if (c == null || c.up != cur || r.keys[slot] != id) c = r.enter(cur, id, slot);
        c.calls++;
        r.cur = c.index;
        return c;
    }

    /** Bytecodes the method executed in context n since its last hand-over (before a call). */
    public static void count(Node n, long bytecodes) {
        n.bytecodes += bytecodes;
    }

    /** Method exit (normal or exceptional): the last bytecodes, and the caller is current. */
    public static void close(Node n, long bytecodes) {
        n.bytecodes += bytecodes;
        n.root.cur = n.up;
    }

    /** Exception handler entry: the catching frame's context is current again. */
    public static void restore(Node n) {
        if (n != null) n.root.cur = n.index;
    }

    // ---- read by the agent (JNI), on its own thread ----

    /**
     * Bytes of maximum heap per node of budget. A kept context costs about 90 bytes (the Node,
     * 64 with compressed oops, its slot in the parent's table, at most half full, and in its
     * thread's index), and may have one spill child: so the trees stay under about a sixth of
     * the heap.
     */
    private static final long HEAP_PER_NODE = 1024;

    /**
     * Sets the node budget (all threads together), at most what the heap affords, and
     * initializes this class (runs before any class is rewritten, so Runtime is untouched).
     */
    public static int init(int max) {
        long afford = Runtime.getRuntime().maxMemory() / HEAP_PER_NODE;
        synchronized (LOCK) {
            if (max > 0) maxNodes = max;
            if (afford > 0 && afford < maxNodes) maxNodes = (int) afford;
            return maxNodes;
        }
    }

    /** Freezes the list of thread trees for threadName/tree and returns how many there are. */
    public static int threads() {
        synchronized (LOCK) {
            Root[] f = new Root[rootCount];
            System.arraycopy(roots, 0, f, 0, rootCount);
            frozen = f;
            return f.length;
        }
    }

    public static String threadName(int i) {
        Root r = frozen[i];
        String n = r.thread.getName();
        return n != null ? n : r.name;
    }

    /**
     * Contexts kept (the budget threads reserved, less what they have not used) and the budget.
     * Calls past the budget are the calls of the SPILL nodes in the trees.
     */
    public static long[] stats() {
        synchronized (LOCK) {
            long used = nodes;
            for (int i = 0; i < rootCount; i++) used -= roots[i].budget;
            return new long[] {used, maxNodes};
        }
    }

    /**
     * Thread i's tree in preorder, four longs per context: depth (the thread's root is 0),
     * method id (-1 for the root), calls, bytecodes.
     */
    public static long[] tree(int i) {
        Root root = frozen[i];
        Node top = root.top;
        // The chain's counts not yet moved to the spill node they belong to (racy, like the rest).
        Node[] chain = root.chain;
        Node owner = chain[1] != null ? root.table[chain[1].up] : null;
        long ownerCalls = 0, ownerBytecodes = 0;
        for (int k = 1; k < chain.length && chain[k] != null; k++) {
            ownerCalls += chain[k].calls;
            ownerBytecodes += chain[k].bytecodes;
        }
        // Every node of the tree is in the thread's table (so are the spill chain's, which
        // the walk skips): room for all, with no growing (javac's trees have millions).
        long[] out = new long[4 * root.tableSize + 4];
        int len = 0;
        Node[] stack = new Node[64];
        int[] depth = new int[64];
        int sp = 0;
        stack[sp] = top;
        depth[sp] = 0;
        sp++;
        while (sp > 0) {
            sp--;
            Node n = stack[sp];
            int d = depth[sp];
            if (len + 4 > out.length) {
                long[] g = new long[out.length * 2];
                System.arraycopy(out, 0, g, 0, len);
                out = g;
            }
            out[len++] = d;
            out[len++] = n.method;
            out[len++] = n.calls + (n == owner ? ownerCalls : 0);
            out[len++] = n.bytecodes + (n == owner ? ownerBytecodes : 0);
            ContextNode[] kids = n.kids;
            if (kids == null) continue;
            for (ContextNode k : kids) {
                if (k == null) continue;
                if (sp == stack.length) {
                    Node[] gs = new Node[sp * 2];
                    System.arraycopy(stack, 0, gs, 0, sp);
                    stack = gs;
                    int[] gd = new int[sp * 2];
                    System.arraycopy(depth, 0, gd, 0, sp);
                    depth = gd;
                }
                stack[sp] = (Node) k;
                depth[sp] = d + 1;
                sp++;
            }
        }
        if (len == out.length) return out;
        long[] r = new long[len];
        System.arraycopy(out, 0, r, 0, len);
        return r;
    }
}
