package jvmprof.runtime;

/**
 * The runtime that code rewritten by the jvmprof agent in exact mode calls (the agent's variant
 * of java/jvmprof/runtime/Probes.java, with the same probe signatures). It is put on the boot
 * class path by the agent, so application and JDK classes can both call it.
 *
 * Each thread builds its own calling-context tree (JP, Binder and Hulaas). Rewritten code keeps
 * its context in a local: {@code node = open(id)} descends from the thread's current context
 * to the child for method id and counts an invocation; the method sums its executed bytecodes
 * in a long local and hands them over with {@code count(node, n)} before each call and
 * {@code close(node, n)} on every normal and exceptional exit, which also makes the caller's
 * context current again; {@code restore(node)} at the start of each exception handler makes
 * the catching frame's context current whatever happened in between. So the hot path is one
 * thread lookup per call and field updates on nodes the thread owns: no lock, no shared write.
 * Counters are 64-bit, so they never overflow; the agent reads the trees (racily while threads
 * run, which only makes a live view slightly stale) through threads(), threadName(i) and
 * tree(i). Trees of finished threads are kept.
 *
 * This class must stay self-contained: it runs inside instrumented JDK code, so it calls no JDK
 * method that the agent may instrument (only ThreadLocal, Thread and System.arraycopy, which the
 * agent never rewrites), uses no lambdas and its static initializer does nothing but allocate.
 */
public final class Probes {
    private Probes() {}

    /** One calling context. */
    public static final class Node {
        final int method;
        final Node parent;
        final Root root;
        long calls;
        long bytecodes;
        /** Children by method id: open addressing, replaced as a whole when it grows. */
        Node[] kids;
        int size;
        int lastKey = -1;
        Node lastKid;

        Node(int method, Node parent, Root root) {
            this.method = method;
            this.parent = parent;
            this.root = root;
        }

        Node child(int id) {
            if (lastKey == id) return lastKid;
            Node c = find(id);
            if (c == null) c = add(id);
            lastKey = id;
            lastKid = c;
            return c;
        }

        private Node find(int id) {
            Node[] t = kids;
            if (t == null) return null;
            int mask = t.length - 1;
            for (int i = (id * 0x9E3779B9) >>> 16 & mask; ; i = (i + 1) & mask) {
                Node n = t[i];
                if (n == null) return null;
                if (n.method == id) return n;
            }
        }

        private Node add(int id) {
            if (!reserveNode()) {
                // Past the node budget: a detached context keeps enter/exit consistent but its
                // counts are lost (and counted as dropped).
                DROPPED[0]++;
                return new Node(id, this, root);
            }
            Node c = new Node(id, this, root);
            Node[] t = kids;
            if (t == null || (size + 1) * 2 > t.length) {
                Node[] g = new Node[t == null ? 4 : t.length * 2];
                if (t != null) for (Node n : t) if (n != null) put(g, n);
                put(g, c);
                kids = g;
            } else {
                put(t, c);
            }
            size++;
            return c;
        }

        private static void put(Node[] t, Node n) {
            int mask = t.length - 1;
            int i = (n.method * 0x9E3779B9) >>> 16 & mask;
            while (t[i] != null) i = (i + 1) & mask;
            t[i] = n;
        }
    }

    /** A thread's tree and where the thread is in it. */
    static final class Root {
        final Thread thread;
        final String name;
        final Node top;
        Node current;

        Root(Thread thread) {
            this.thread = thread;
            this.name = thread.getName();
            this.top = new Node(-1, null, this);
            this.current = top;
        }
    }

    private static final ThreadLocal<Root> CURRENT = new ThreadLocal<Root>();
    private static final Object LOCK = new Object();
    private static Root[] roots = new Root[16];
    private static int rootCount;
    private static Root[] frozen = new Root[0];
    private static int nodes;
    private static int maxNodes = 1 << 22;
    /** Calls whose context was not kept because the node budget was spent (racy, approximate). */
    private static final long[] DROPPED = new long[1];

    private static boolean reserveNode() {
        synchronized (LOCK) {
            if (nodes >= maxNodes) return false;
            nodes++;
            return true;
        }
    }

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

    /** Method entry: the context of method id under the thread's current one, counted. */
    public static Node open(int id) {
        Root r = root();
        Node c = r.current.child(id);
        c.calls++;
        r.current = c;
        return c;
    }

    /** Bytecodes the method executed in context n since its last hand-over (before a call). */
    public static void count(Node n, long bytecodes) {
        n.bytecodes += bytecodes;
    }

    /** Method exit (normal or exceptional): the last bytecodes, and the caller is current. */
    public static void close(Node n, long bytecodes) {
        n.bytecodes += bytecodes;
        n.root.current = n.parent;
    }

    /** Exception handler entry: the catching frame's context is current again. */
    public static void restore(Node n) {
        if (n != null) n.root.current = n;
    }

    // ---- read by the agent (JNI), on its own thread ----

    /** Sets the node budget (all threads together) and initializes this class. */
    public static int init(int max) {
        synchronized (LOCK) {
            if (max > 0) maxNodes = max;
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

    /** Nodes created and calls dropped past the node budget. */
    public static long[] stats() {
        synchronized (LOCK) {
            return new long[] {nodes, maxNodes, DROPPED[0]};
        }
    }

    /**
     * Thread i's tree in preorder, four longs per context: depth (the thread's root is 0),
     * method id (-1 for the root), calls, bytecodes.
     */
    public static long[] tree(int i) {
        Node top = frozen[i].top;
        long[] out = new long[64];
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
            out[len++] = n.calls;
            out[len++] = n.bytecodes;
            Node[] kids = n.kids;
            if (kids == null) continue;
            for (Node k : kids) {
                if (k == null) continue;
                if (sp == stack.length) {
                    Node[] gs = new Node[sp * 2];
                    System.arraycopy(stack, 0, gs, 0, sp);
                    stack = gs;
                    int[] gd = new int[sp * 2];
                    System.arraycopy(depth, 0, gd, 0, sp);
                    depth = gd;
                }
                stack[sp] = k;
                depth[sp] = d + 1;
                sp++;
            }
        }
        long[] r = new long[len];
        System.arraycopy(out, 0, r, 0, len);
        return r;
    }
}
