package jvmprof.runtime;

/**
 * The runtime that root-method profiling (JFluid) calls: the agent instruments only the call
 * subgraph of the root methods, revealed lazily, and removes the probes at the end of the
 * session. Defined in the boot loader by the agent (at launch or attach), so every class can call
 * it.
 *
 * Probes (the exact mode's pass, see crates/classfile subgraph.rs): {@code node = openRoot(id)}
 * in a root method, {@code node = open(id)} in the others, {@code close(node, bytecodes)} on every
 * normal and exceptional exit, {@code restore(node)} at the start of each exception handler,
 * {@code count(node, bytecodes)} before calls when bytecodes are counted, {@code reflect(m)}
 * before each {@code Method.invoke}.
 *
 * Context-sensitive: a thread records only while a root method is on its stack ({@code depth >
 * 0}); elsewhere open returns null after a flag check and a thread lookup, and the other probes
 * do nothing with null. Below a root each thread builds its own calling-context tree; each
 * activation's times sit in per-depth arrays (start, time of its callees, calls below it), so a
 * call allocates nothing once its context exists. On exit the activation's inclusive time is
 * corrected for the probes' own cost as the agent calibrated it (JFluid): {@code inner} for the
 * activation itself and {@code inner + outer} for each call below it; its own time is that less
 * its callees' corrected times.
 *
 * The first time a method runs below a root, {@code reveal(id)} (native, in the agent) reads its
 * code and instruments what it may call before it continues, so its first run is already
 * counted; the time that takes is taken out of every activation on the thread's stack.
 *
 * With a minimum latency, an activation's numbers first go to pending fields of its node, which
 * the root's exit adds to the node's totals when the root invocation took at least that long,
 * and drops otherwise.
 *
 * Trace mode (JaViz) uses the same probes on every method of the traced classes, at any depth,
 * and also logs each call's entry and exit with its time into the thread's ring buffer, which
 * the agent drains every few milliseconds. A ring never grows: a call that finds no room is
 * dropped whole (its exit too) and counted. The JDK's remote-call paths (RMI, HTTP) get
 * probes that log remote spans with what identifies the call on the other side (see the
 * "remote calls" section).
 *
 * Self-contained like Probes: no JDK method the agent may instrument, no lambdas.
 */
public final class Roots {
    private Roots() {}

    /** Method id of the context standing for calls past the node budget. */
    static final int SPILL = -2;

    /** One calling context below a root. */
    public static final class Node {
        final int method;
        final int parent;
        final T t;
        final int index;
        Node[] kids;
        int size;
        int lastKey = -3;
        Node lastKid;
        long calls, selfNs, bytecodes, inclNs, min = Long.MAX_VALUE, max = Long.MIN_VALUE;
        double inclSq;
        // Pending (minimum latency): this root invocation's part, not yet kept.
        int epoch;
        long pCalls, pSelf, pBytecodes, pIncl, pMin, pMax;
        double pSq;

        Node(int method, Node parent, T t) {
            this.method = method;
            this.parent = parent == null ? -1 : parent.index;
            this.t = t;
            this.index = t.register(this);
        }

        /** A marker outside the tree (a task's span token): no context, never exported. */
        Node(T t, int method) {
            this.method = method;
            this.parent = -1;
            this.t = t;
            this.index = -1;
        }

        Node child(int id) {
            if (lastKey == id) return lastKid;
            if (method == SPILL) return this;
            Node c = find(id);
            if (c == null) c = add(id);
            lastKey = id;
            lastKid = c;
            return c;
        }

        private Node find(int id) {
            Node[] k = kids;
            if (k == null) return null;
            int mask = k.length - 1;
            for (int i = (id * 0x9E3779B9) >>> 16 & mask; ; i = (i + 1) & mask) {
                Node n = k[i];
                if (n == null) return null;
                if (n.method == id) return n;
            }
        }

        private Node add(int id) {
            if (!reserve(t)) {
                Node s = find(SPILL);
                if (s == null) {
                    s = new Node(SPILL, this, t);
                    insert(s);
                }
                return s;
            }
            Node c = new Node(id, this, t);
            insert(c);
            return c;
        }

        private void insert(Node c) {
            Node[] k = kids;
            if (k == null || (size + 1) * 2 > k.length) {
                Node[] g = new Node[k == null ? 4 : k.length * 2];
                if (k != null) for (Node n : k) if (n != null) put(g, n);
                put(g, c);
                kids = g;
            } else {
                put(k, c);
            }
            size++;
        }

        private static void put(Node[] k, Node n) {
            int mask = k.length - 1;
            int i = (n.method * 0x9E3779B9) >>> 16 & mask;
            while (k[i] != null) i = (i + 1) & mask;
            k[i] = n;
        }
    }

    /** A thread's tree and its activations below a root. */
    static final class T {
        final Thread thread;
        final String name;
        final int session;
        final Node top;
        /** Activations below a root on this thread's stack; 0 outside every root. */
        int depth;
        Node[] stack = new Node[32];
        long[] start = new long[32];
        /** Corrected inclusive time of the activation's callees so far. */
        long[] child = new long[32];
        /** Calls made below the activation so far. */
        long[] below = new long[32];
        Node[] all = new Node[64];
        int count;
        long calls;
        int budget;
        int epoch;
        Node[] touched = new Node[64];
        int nTouched;
        Object lastReflected;
        // Trace mode: the event ring (pairs of longs: tag and payload, then time), the notes
        // the events refer to, what the agent has taken, and which activations were logged.
        long[] ring;
        long written;
        long taken;
        String[] notes;
        long notesWritten;
        long notesTaken;
        boolean[] logged = new boolean[32];
        int loggedOpen;
        long dropped;
        long httpCalls;
        String lastConnection;
        Node pending;
        Object remoteObject;
        // Trace mode: the call tree the thread is in, published for the samplers.
        final long javaId;
        /** The tree this thread's samples and new trees belong to (0: none). */
        long context;
        /** The tree of the task the thread runs for another thread's tree (0: none). */
        long inherited;
        /** Trees begun on this thread (the low bits of their ids). */
        int trees;
        /** The name the last NAME event logged. */
        String traceName;
        java.nio.ByteBuffer cell;
        boolean cellAsked;
        /** Tasks running on this thread for another tree: what to restore when each ends. */
        long[] savedInherited = new long[4], savedContext = new long[4];
        Object[] taskOf = new Object[4];
        int tasks;
        Node taskToken;

        T(Thread thread, int session) {
            this.thread = thread;
            this.name = thread.getName();
            this.session = session;
            this.top = new Node(-1, null, this);
            this.javaId = thread.getId();
        }

        int register(Node n) {
            if (count == all.length) {
                Node[] g = new Node[all.length * 2];
                System.arraycopy(all, 0, g, 0, count);
                all = g;
            }
            all[count] = n;
            return count++;
        }

        void grow() {
            int n = stack.length * 2;
            Node[] s = new Node[n];
            System.arraycopy(stack, 0, s, 0, stack.length);
            stack = s;
            long[] a = new long[n];
            System.arraycopy(start, 0, a, 0, start.length);
            start = a;
            a = new long[n];
            System.arraycopy(child, 0, a, 0, child.length);
            child = a;
            a = new long[n];
            System.arraycopy(below, 0, a, 0, below.length);
            below = a;
            boolean[] l = new boolean[n];
            System.arraycopy(logged, 0, l, 0, logged.length);
            logged = l;
        }

        void touch(Node n) {
            n.epoch = epoch;
            n.pCalls = 0;
            n.pSelf = 0;
            n.pBytecodes = 0;
            n.pIncl = 0;
            n.pSq = 0;
            n.pMin = Long.MAX_VALUE;
            n.pMax = Long.MIN_VALUE;
            if (nTouched == touched.length) {
                Node[] g = new Node[touched.length * 2];
                System.arraycopy(touched, 0, g, 0, nTouched);
                touched = g;
            }
            touched[nTouched++] = n;
        }
    }

    // ---- set by the agent ----
    /** Whether a session runs. */
    static volatile boolean on;
    /** Session number: threads' trees from an earlier session are left alone. */
    static int session;
    /** Per method id: already revealed (its callees instrumented). */
    static boolean[] revealed = new boolean[64];
    /** Probe cost inside an activation and added to its caller per call, in 1/256 ns. */
    static long inner256, outer256;
    static boolean cpu;
    /** Trace mode: record at any depth, log events, reveal nothing (all is instrumented). */
    static boolean trace;
    /** Trace mode: events each thread's ring holds (a power of two). */
    static int ringEvents = 1 << 16;
    /** Trace mode: this session's random id, the prefix of its HTTP call ids. */
    static String sessionId = "0";
    static long minLatency;
    static int maxNodes = 1 << 20;

    private static final Object LOCK = new Object();
    private static T[] threads = new T[16];
    private static int threadCount;
    private static T[] frozen = new T[0];
    private static int nodes;
    private static boolean full;
    private static final int CHUNK = 256;
    private static final ThreadLocal<T> CURRENT = new ThreadLocal<T>();
    private static final T[] BY_ID = new T[4096];

    private static native void reveal(int id);
    private static native void reflected(Object method);
    private static native long cpuNow();

    static long now() {
        return cpu ? cpuNow() : System.nanoTime();
    }

    private static T current() {
        Thread th = Thread.currentThread();
        int slot = (int) th.getId() & (BY_ID.length - 1);
        T t = BY_ID[slot];
        if (t != null && t.thread == th && t.session == session) return t;
        t = CURRENT.get();
        if (t == null || t.session != session) {
            t = new T(th, session);
            synchronized (LOCK) {
                if (threadCount == threads.length) {
                    T[] g = new T[threads.length * 2];
                    System.arraycopy(threads, 0, g, 0, threadCount);
                    threads = g;
                }
                threads[threadCount++] = t;
            }
            CURRENT.set(t);
        }
        BY_ID[slot] = t;
        return t;
    }

    static boolean reserve(T t) {
        if (t.budget > 0) {
            t.budget--;
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
            t.budget = n - 1;
            return true;
        }
    }

    // ---- probes ----

    /** Entry of an instrumented method: its context if a root is on this thread's stack. */
    public static Node open(int id) {
        if (!on) return null;
        T t = current();
        if (t.depth == 0 && !trace) return null;
        return push(t, id);
    }

    /** Entry of a root method: a new root invocation, or a nested call below one. */
    public static Node openRoot(int id) {
        if (!on) return null;
        T t = current();
        if (t.depth == 0) {
            t.epoch++;
            t.nTouched = 0;
        }
        return push(t, id);
    }

    @jdk.internal.vm.annotation.DontInline
    private static Node push(T t, int id) {
        boolean[] r = revealed;
        if (id >= 0 && !trace && (id >= r.length || !r[id])) revealNow(t, id);
        int d = t.depth + 1;
        if (d == t.stack.length) t.grow();
        Node parent = d == 1 ? t.top : t.stack[d - 1];
        Node n = parent.child(id);
        t.stack[d] = n;
        t.child[d] = 0;
        t.below[d] = 0;
        t.depth = d;
        if (trace) {
            t.logged[d] = logEntry(t, id, d);
        } else {
            t.start[d] = now();
        }
        return n;
    }

    /**
     * Trace mode: logs an activation's entry with its time if the ring has room for it. A call
     * that finds none is dropped whole and never reads the clock (trace mode's tree counts
     * calls; their times are the events').
     */
    private static boolean logEntry(T t, int id, int d) {
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

    // ---- trace mode: the event ring ----

    /**
     * Event tags (low three bits of an event's first long; the rest is a method id or a note's
     * index; an ENTER's bits from TREE_SHIFT up hold the number of the tree it begins on its
     * thread, 0 inside a tree). A CONTEXT event follows the entry of a thread's outermost
     * activation when the tree is not the thread's own (a task handed over, a remote span); its
     * second long is the tree's id instead of a time. A NAME event (a note: the
     * thread's name) comes before a thread's first tree and before any tree begun after the
     * thread was renamed (RMI names its threads after the connection they serve).
     */
    static final int ENTER = 0, EXIT = 1, REMOTE = 2, CONNECTION = 3, CONTEXT = 4, NAME = 5,
            TAG_BITS = 3;

    /**
     * Logs one event; an activation's entry only if there is room for it and for the exits of
     * every activation logged and still open (so an exit always finds room).
     */
    static final long TAG_MASK = (1 << TAG_BITS) - 1;

    /** Events a thread's ring starts with; it doubles up to ringEvents when it fills. */
    static final int FIRST_RING = 1024;

    private static void rings(T t) {
        if (t.ring == null) {
            t.notes = new String[16];
            t.ring = new long[Math.min(FIRST_RING, ringEvents) * 2];
        }
    }

    /**
     * A ring twice as large holding the untaken events at the same (absolute) positions. The
     * agent reads {@code written} before {@code ring}, so it sees the new ring whenever it
     * sees an event written into it, and the old one stays as it was for a drain under way.
     */
    private static void growRing(T t) {
        long[] old = t.ring;
        int cap = old.length / 2, bigger = cap * 2;
        long[] ring = new long[bigger * 2];
        for (long k = t.taken; k < t.written; k++) {
            int from = (int) (k & (cap - 1)) * 2, to = (int) (k & (bigger - 1)) * 2;
            ring[to] = old[from];
            ring[to + 1] = old[from + 1];
        }
        t.ring = ring;
    }

    /**
     * Logs one event if the ring has room for it: an exit needs one slot (kept for it when its
     * entry was logged); any other event needs {@code need} slots beyond those kept for the
     * exits of the logged, open activations (an entry 2: itself and its exit; a tree's first
     * entry 3: and its CONTEXT; others 1).
     */
    private static boolean log(T t, long head, long time, int need, boolean opens) {
        long want = (head & TAG_MASK) == EXIT ? 1 : t.loggedOpen + need;
        if (!room(t, want)) {
            if (opens) t.dropped++;
            return false;
        }
        put(t, head, time);
        if (opens) t.loggedOpen++;
        return true;
    }

    /** Whether the ring has {@code want} free slots (growing it up to its bound if not). */
    private static boolean room(T t, long want) {
        rings(t);
        int cap = t.ring.length / 2;
        if (cap - (t.written - t.taken) >= want) return true;
        if (cap >= ringEvents) return false;
        growRing(t);
        return t.ring.length / 2 - (t.written - t.taken) >= want;
    }

    /** Writes one event (room checked) and publishes it to the agent's drain. */
    private static void put(T t, long head, long time) {
        long[] ring = t.ring;
        int at = (int) (t.written & (ring.length / 2 - 1)) * 2;
        ring[at] = head;
        ring[at + 1] = time;
        WRITTEN.setRelease(t, t.written + 1);
    }

    /** A note for an event: its index, or -1 when the notes ring is full. */
    private static long note(T t, String text) {
        rings(t);
        String[] n = t.notes;
        if (t.notesWritten - t.notesTaken >= n.length && n.length < Math.max(16, ringEvents / 8)) {
            // Twice as large, the untaken notes at the same positions (see growRing).
            String[] bigger = new String[n.length * 2];
            for (long k = t.notesTaken; k < t.notesWritten; k++) {
                bigger[(int) (k % bigger.length)] = n[(int) (k % n.length)];
            }
            n = t.notes = bigger;
        }
        if (t.notesWritten - t.notesTaken >= n.length) return -1;
        long at = t.notesWritten;
        n[(int) (at % n.length)] = text;
        NOTES_WRITTEN.setRelease(t, at + 1);
        return at;
    }

    private static final java.lang.invoke.VarHandle WRITTEN;
    private static final java.lang.invoke.VarHandle NOTES_WRITTEN;

    static {
        try {
            java.lang.invoke.MethodHandles.Lookup l = java.lang.invoke.MethodHandles.lookup();
            WRITTEN = l.findVarHandle(T.class, "written", long.class);
            NOTES_WRITTEN = l.findVarHandle(T.class, "notesWritten", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private static void revealNow(T t, int id) {
        long a = now();
        reveal(id);
        boolean[] r = revealed;
        if (id < r.length) r[id] = true;
        shift(t, now() - a);
    }

    /** Takes a pause (revealing, instrumenting) out of every activation on the stack. */
    private static void shift(T t, long pause) {
        for (int k = 1; k <= t.depth; k++) t.start[k] += pause;
    }

    /** Bytecodes the method executed since its last hand-over (before a call). */
    public static void count(Node n, long bytecodes) {
        if (n == null) return;
        if (minLatency == 0) {
            n.bytecodes += bytecodes;
        } else {
            T t = n.t;
            if (n.epoch != t.epoch) t.touch(n);
            n.pBytecodes += bytecodes;
        }
    }

    /** Exit (normal or exceptional) of an instrumented method. */
    public static void close(Node n, long bytecodes) {
        // Outside every root (n is null) this is all a compiled method runs: small enough to
        // be inlined everywhere, the rest out of line.
        if (n != null) leave(n, bytecodes);
    }

    @jdk.internal.vm.annotation.DontInline
    private static void leave(Node n, long bytecodes) {
        if (n.method == TASK) {
            endTask(n.t);
            return;
        }
        long end = trace ? 0 : now();
        T t = n.t;
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

    /** Exception handler entry: the catching frame's activation is the current one again. */
    public static void restore(Node n) {
        if (n == null) return;
        T t = n.t;
        int d = t.depth;
        if (d == 0 || t.stack[d] == n) return;
        int k = d;
        while (k > 0 && t.stack[k] != n) k--;
        if (k == 0) return;
        long end = now();
        while (t.depth > k) pop(t, end, 0);
    }

    /** Before {@code Method.invoke} in an instrumented method: reveal the reflective callee. */
    public static void reflect(java.lang.reflect.Method m) {
        if (!on || m == null) return;
        T t = current();
        if (t.depth == 0 || t.lastReflected == m) return;
        t.lastReflected = m;
        long a = now();
        reflected(m);
        shift(t, now() - a);
    }

    private static void pop(T t, long end, long bytecodes) {
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
    private static void finishRoot(T t, boolean keep) {
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

    // ---- trace mode: remote calls (probes the agent puts into the JDK's RMI and HTTP code) ----

    // ---- trace mode: call trees, shared with the samplers and across hand-offs ----

    /** Method id of a task's span token (see taskRun). */
    static final int TASK = -5;
    /** Set by the agent: cpu or wall samples are taken, so threads publish their trees. */
    static volatile boolean linkSamples;
    private static native java.nio.ByteBuffer contextCell(long javaThreadId);
    /** A thread's trees are numbered 1..TREE_MASK (then again from 1): 28 bits. */
    static final int TREE_MASK = (1 << 28) - 1;
    /** Where an ENTER carries its tree number: above the method id's 32 bits and the tag. */
    static final int TREE_SHIFT = 35;

    public static void setLinkSamples(boolean value) {
        linkSamples = value;
    }

    /**
     * The tree a thread's outermost activation begins: the tree of the task the thread runs for
     * another thread, or a new one, numbered on the thread ({@code thread id << 30 | n}).
     */
    private static long openTree(T t) {
        String name = t.thread.getName();
        if (name != t.traceName && name != null && !name.equals(t.traceName)) {
            t.traceName = name;
            long at = note(t, name);
            if (at >= 0) log(t, (at << TAG_BITS) | NAME, now(), 1, false);
        }
        long id = t.inherited;
        if (id == 0) {
            t.trees = t.trees >= TREE_MASK ? 1 : t.trees + 1;
            id = (t.javaId << 30) | t.trees;
        }
        publish(t, id);
        return id;
    }

    /** The thread is in tree {@code id} (0: none) from now on: for hand-offs and samplers. */
    private static void publish(T t, long id) {
        t.context = id;
        if (!linkSamples) return;
        java.nio.ByteBuffer c = t.cell;
        if (c == null) {
            if (t.cellAsked) return;
            t.cellAsked = true;
            c = contextCell(t.javaId);
            if (c == null) return;
            t.cell = c = c.order(java.nio.ByteOrder.nativeOrder());
        }
        c.putLong(0, id);
    }

    /** Tasks handed over and not started yet: task → the tree it was created in. */
    private static final java.util.IdentityHashMap<Object, Long> TASKS =
            new java.util.IdentityHashMap<Object, Long>();
    /** TASKS' size, read without the lock: workers skip the lock while nothing is pending. */
    private static volatile int pendingTasks;
    static final int MAX_TASKS = 1 << 16;
    /** Hand-offs forgotten because too many tasks waited at once. */
    static long lostHandOffs;

    /** A task object created on this thread (a constructor's end): it runs in this tree. */
    public static void handedOff(Object task) {
        handOff(task);
    }

    /** A task submitted on this thread (an executor's execute): it runs in this tree. */
    public static Node handOff(Object task) {
        if (!on || !trace || task == null) return null;
        T t = current();
        long id = t.context;
        if (id == 0) return null;
        synchronized (TASKS) {
            if (TASKS.size() >= MAX_TASKS) {
                lostHandOffs += TASKS.size();
                TASKS.clear();
            }
            TASKS.put(task, Long.valueOf(id));
            pendingTasks = TASKS.size();
        }
        return null;
    }

    /** The tree a task was handed over in (removing it), or 0. */
    private static long takeTask(Object task) {
        if (pendingTasks == 0) return 0;
        synchronized (TASKS) {
            Long v = TASKS.remove(task);
            pendingTasks = TASKS.size();
            return v == null ? 0 : v.longValue();
        }
    }

    /** The thread starts running a task for tree {@code id}. */
    private static void beginTask(T t, Object task, long id) {
        int k = t.tasks;
        if (k == t.taskOf.length) {
            t.taskOf = java.util.Arrays.copyOf(t.taskOf, k * 2);
            t.savedInherited = java.util.Arrays.copyOf(t.savedInherited, k * 2);
            t.savedContext = java.util.Arrays.copyOf(t.savedContext, k * 2);
        }
        t.taskOf[k] = task;
        t.savedInherited[k] = t.inherited;
        t.savedContext[k] = t.context;
        t.tasks = k + 1;
        t.inherited = id;
        publish(t, id);
    }

    /** The innermost task ends: the thread is back where it was before it. */
    private static void endTask(T t) {
        int k = t.tasks - 1;
        if (k < 0) return;
        t.tasks = k;
        t.taskOf[k] = null;
        t.inherited = t.savedInherited[k];
        publish(t, t.savedContext[k]);
    }

    /** A task's run method starts (FutureTask, CompletableFuture's async tasks): its span. */
    public static Node taskRun(Object task) {
        if (!on || !trace || task == null) return null;
        long id = takeTask(task);
        if (id == 0) return null;
        T t = current();
        beginTask(t, task, id);
        if (t.taskToken == null) t.taskToken = new Node(t, TASK);
        return t.taskToken;
    }

    /** ThreadPoolExecutor.beforeExecute(thread, task): the worker starts a task. */
    public static void taskBegin(Object task) {
        if (!on || !trace || task == null) return;
        long id = takeTask(task);
        if (id != 0) beginTask(current(), task, id);
    }

    /** ThreadPoolExecutor.afterExecute(task, thrown): the worker is done with it. */
    public static void taskEnd(Object task) {
        if (!on || !trace || task == null) return;
        T t = current();
        if (t.tasks > 0 && t.taskOf[t.tasks - 1] == task) endTask(t);
    }

    static final int REMOTE_METHOD = -4;
    static final String CLIENT = "client", SERVER = "server", RMI = "rmi", HTTP = "http";
    /** The request header that carries an HTTP call's id from client to server. */
    public static final String HEADER = "X-Jvmprof-Call";

    /** Opens a remote span (an activation) and logs it with its note. */
    private static Node remote(T t, String side, String protocol, String key, String label, Object o) {
        long at = note(t, side + "\u0000" + protocol + "\u0000" + key + "\u0000" + label);
        int d = t.depth + 1;
        if (d == t.stack.length) t.grow();
        Node parent = d == 1 ? t.top : t.stack[d - 1];
        Node n = parent.child(REMOTE_METHOD);
        t.stack[d] = n;
        t.child[d] = 0;
        t.below[d] = 0;
        t.depth = d;
        t.start[d] = now();
        if (d == 1) {
            long tree = openTree(t);
            t.logged[d] = at >= 0 && log(t, (at << TAG_BITS) | REMOTE, t.start[d], 3, true);
            if (t.logged[d]) log(t, CONTEXT, tree, 1, false);
        } else {
            t.logged[d] = at >= 0 && log(t, (at << TAG_BITS) | REMOTE, t.start[d], 2, true);
        }
        t.remoteObject = o;
        return n;
    }

    private static boolean inRemote(T t, String side, Object o) {
        return t.depth > 0 && t.stack[t.depth].method == REMOTE_METHOD && t.remoteObject == o;
    }

    /** UnicastRef.invoke(obj, method, params, opnum): the client side of an RMI call. */
    public static Node rmiClient(Object method) {
        if (!on || !trace || !(method instanceof java.lang.reflect.Method)) return null;
        java.lang.reflect.Method m = (java.lang.reflect.Method) method;
        String name = m.getDeclaringClass().getName() + "." + m.getName();
        return remote(current(), CLIENT, RMI, name, name, null);
    }

    /** UnicastServerRef.dispatch(obj, call): the server side (not the registry's or DGC's). */
    public static Node rmiServer(Object target) {
        if (!on || !trace || target == null) return null;
        String c = target.getClass().getName();
        if (c.startsWith("sun.rmi.") || c.startsWith("java.rmi.")) return null;
        return remote(current(), SERVER, RMI, "", c, null);
    }

    /** TCPConnection.getInputStream/getOutputStream: the RMI connection this thread uses. */
    public static void rmiSocket(Object socket) {
        if (!on || !trace || !(socket instanceof java.net.Socket)) return;
        java.net.Socket s = (java.net.Socket) socket;
        T t = current();
        String c = s.getLocalAddress().getHostAddress() + ":" + s.getLocalPort() + "\u0000"
                + s.getInetAddress().getHostAddress() + ":" + s.getPort();
        if (c.equals(t.lastConnection)) return;
        t.lastConnection = c;
        long at = note(t, c);
        if (at >= 0) log(t, (at << TAG_BITS) | CONNECTION, now(), 1, false);
    }

    private static String newCallId(T t) {
        return sessionId + "-" + t.thread.getId() + "-" + (++t.httpCalls);
    }

    /** HttpURLConnection's constructor: the request carries a new call id. */
    public static void httpOpened(Object connection) {
        if (!on || !trace || !(connection instanceof java.net.URLConnection)) return;
        try {
            ((java.net.URLConnection) connection).setRequestProperty(HEADER, newCallId(current()));
        } catch (RuntimeException e) {
            // Already connected or refused: this call goes without an id.
        }
    }

    /** HttpURLConnection.getInputStream: the client span of the request (the outermost one). */
    public static Node httpUrlCall(Object connection) {
        if (!on || !trace || !(connection instanceof java.net.HttpURLConnection)) return null;
        T t = current();
        if (inRemote(t, CLIENT, connection)) return null;
        java.net.HttpURLConnection c = (java.net.HttpURLConnection) connection;
        String id = c.getRequestProperty(HEADER);
        return remote(t, CLIENT, HTTP, id == null ? "" : id,
                c.getRequestMethod() + " " + c.getURL(), connection);
    }

    /** HttpClient.send(request, handler): the request with a call id; the span is pending. */
    public static Object httpSend(Object request) {
        if (!on || !trace || request == null) return request;
        T t = current();
        try {
            String id = newCallId(t);
            Object copy = Http.withHeader(request, HEADER, id);
            t.pending = remote(t, CLIENT, HTTP, id, Http.describe(copy), null);
            return copy;
        } catch (Throwable e) {
            return request;
        }
    }

    /** The span httpSend opened (null if none). */
    public static Node pending() {
        if (!on || !trace) return null;
        T t = current();
        Node n = t.pending;
        t.pending = null;
        return n;
    }

    /** com.sun.net.httpserver Filter.Chain.doFilter(exchange): the server side (outermost). */
    public static Node httpServe(Object exchange) {
        if (!on || !trace || exchange == null) return null;
        T t = current();
        if (inRemote(t, SERVER, exchange)) return null;
        String id = "", label = "HTTP";
        try {
            id = Http.header(exchange, HEADER);
            label = Http.describeExchange(exchange);
        } catch (Throwable e) {
            // An exchange we cannot read: served without an id.
        }
        return remote(t, SERVER, HTTP, id == null ? "" : id, label, exchange);
    }

    /** Reflection over the public HTTP APIs (java.net.http and jdk.httpserver are not boot modules). */
    static final class Http {
        private Http() {}

        static Class<?> up(Class<?> c, String name) {
            for (; c != null; c = c.getSuperclass()) if (c.getName().equals(name)) return c;
            return null;
        }

        static Object withHeader(Object request, String key, String value) throws Exception {
            Class<?> req = up(request.getClass(), "java.net.http.HttpRequest");
            Class<?> pred = java.util.function.BiPredicate.class;
            Object b = req.getMethod("newBuilder", req, pred).invoke(null, request, new All());
            Class<?> bi = Class.forName("java.net.http.HttpRequest$Builder", false, req.getClassLoader());
            b = bi.getMethod("setHeader", String.class, String.class).invoke(b, key, value);
            return bi.getMethod("build").invoke(b);
        }

        static String describe(Object request) throws Exception {
            Class<?> req = up(request.getClass(), "java.net.http.HttpRequest");
            return req.getMethod("method").invoke(request) + " " + req.getMethod("uri").invoke(request);
        }

        static String header(Object exchange, String key) throws Exception {
            Class<?> ex = up(exchange.getClass(), "com.sun.net.httpserver.HttpExchange");
            Object headers = ex.getMethod("getRequestHeaders").invoke(exchange);
            // Through the public class: the object may be of a JDK-internal subclass.
            Class<?> h = up(headers.getClass(), "com.sun.net.httpserver.Headers");
            return (String) h.getMethod("getFirst", String.class).invoke(headers, key);
        }

        static String describeExchange(Object exchange) throws Exception {
            Class<?> ex = up(exchange.getClass(), "com.sun.net.httpserver.HttpExchange");
            return ex.getMethod("getRequestMethod").invoke(exchange) + " "
                    + ex.getMethod("getRequestURI").invoke(exchange);
        }

        /** Keeps every header of the copied request. */
        static final class All implements java.util.function.BiPredicate<String, String> {
            public boolean test(String a, String b) {
                return true;
            }
        }
    }

    // ---- the agent's side (JNI, on its own thread) ----

    /** Starts a session: fresh trees, the settings, the revealed flags cleared. */
    public static void begin(boolean cpuTimer, long minLatencyNs, int budget, boolean traceMode,
            int events, String sessionName) {
        synchronized (LOCK) {
            on = false;
            session++;
            threads = new T[16];
            threadCount = 0;
            frozen = new T[0];
            nodes = 0;
            full = false;
            maxNodes = budget > 0 ? budget : maxNodes;
            // A context costs about a hundred bytes: the trees stay under a tenth of the heap.
            long afford = Runtime.getRuntime().maxMemory() / 1024;
            if (afford > 0 && afford < maxNodes) maxNodes = (int) afford;
        }
        cpu = cpuTimer;
        minLatency = minLatencyNs;
        trace = traceMode;
        int e = 16;
        while (e < events && e < (1 << 26)) e <<= 1;
        ringEvents = e;
        sessionId = sessionName;
        revealed = new boolean[64];
    }

    /** Room for method ids below n (ids grow as methods are revealed). */
    public static void ensure(int n) {
        boolean[] r = revealed;
        if (n <= r.length) return;
        int size = r.length;
        while (size < n) size *= 2;
        boolean[] g = new boolean[size];
        System.arraycopy(r, 0, g, 0, r.length);
        revealed = g;
    }

    /** Marks a method revealed without calling the agent (the calibration's methods). */
    public static void markRevealed(int id) {
        ensure(id + 1);
        revealed[id] = true;
    }

    public static void setOn(boolean value) {
        on = value;
    }

    public static void setCorrection(long inner, long outer) {
        inner256 = inner;
        outer256 = outer;
    }

    /**
     * Measures the probes' cost on this JVM with the probes compiled: RootsCalibration.loop (a
     * root, id 0) calls RootsCalibration.empty (id 1) n times; plainLoop does the same without
     * probes. Over rounds (the first half warms the compilers up) the median of: inner, the
     * mean measured time of empty (probe code between its two timestamps, as its body is next
     * to nothing); outer, what each call adds to loop's own time beyond the plain loop's. In
     * 1/256 ns: {inner, outer}. Runs on the calling (agent) thread with a tree of its own that
     * no profile sees.
     */
    public static long[] calibrate(int rounds, int n) {
        boolean wasOn = on;
        long savedInner = inner256, savedOuter = outer256, savedLatency = minLatency;
        inner256 = 0;
        outer256 = 0;
        minLatency = 0;
        on = true;
        Thread th = Thread.currentThread();
        int slot = (int) th.getId() & (BY_ID.length - 1);
        T saved = BY_ID[slot];
        long[] inners = new long[rounds];
        long[] outers = new long[rounds];
        try {
            for (int r = 0; r < rounds; r++) {
                T t = new T(th, session);
                t.budget = 16;
                BY_ID[slot] = t;
                RootsCalibration.loop(n);
                long a = now();
                RootsCalibration.plainLoop(n);
                long plain = now() - a;
                Node loop = t.top.find(0);
                Node empty = loop == null ? null : loop.find(1);
                if (empty == null || empty.calls == 0) return null;
                inners[r] = empty.inclNs * 256 / empty.calls;
                outers[r] = (loop.selfNs - plain) * 256 / n;
            }
        } finally {
            BY_ID[slot] = saved;
            on = wasOn;
            inner256 = savedInner;
            outer256 = savedOuter;
            minLatency = savedLatency;
        }
        int half = rounds / 2;
        long[] a = new long[rounds - half];
        long[] b = new long[rounds - half];
        System.arraycopy(inners, half, a, 0, a.length);
        System.arraycopy(outers, half, b, 0, b.length);
        java.util.Arrays.sort(a);
        java.util.Arrays.sort(b);
        long outer = b[b.length / 2];
        return new long[] {a[a.length / 2], outer < 0 ? 0 : outer};
    }

    /** Freezes the list of thread trees for threadName/tree and returns how many there are. */
    public static int threads() {
        synchronized (LOCK) {
            T[] f = new T[threadCount];
            System.arraycopy(threads, 0, f, 0, threadCount);
            frozen = f;
            return f.length;
        }
    }

    public static String threadName(int i) {
        T t = frozen[i];
        String n = t.thread.getName();
        return n != null ? n : t.name;
    }

    /** Values per node of tree(i). */
    static final int FIELDS = 9;

    /**
     * Thread i's contexts in creation order (a parent before its children), FIELDS longs each:
     * parent index (-1 for the thread's top), method id, calls, own time, bytecodes, inclusive
     * time, the bits of the sum of squared inclusive times (a double), min, max.
     */
    public static long[] tree(int i) {
        T t = frozen[i];
        int n = t.count;
        Node[] all = t.all;
        if (n > all.length) n = all.length;
        long[] out = new long[n * FIELDS];
        for (int k = 0; k < n; k++) {
            Node x = all[k];
            if (x == null) continue;
            int o = k * FIELDS;
            out[o] = x.parent;
            out[o + 1] = x.method;
            out[o + 2] = x.calls;
            out[o + 3] = x.selfNs;
            out[o + 4] = x.bytecodes;
            out[o + 5] = x.inclNs;
            out[o + 6] = Double.doubleToRawLongBits(x.inclSq);
            out[o + 7] = x.min;
            out[o + 8] = x.max;
        }
        return out;
    }

    /**
     * Trace mode: thread i's events since the last drain, pairs of longs (tag and payload,
     * time), preceded by the thread's id and its dropped calls so far.
     */
    public static long[] drain(int i) {
        T t = frozen[i];
        long end = (long) WRITTEN.getAcquire(t);
        long from = t.taken;
        long[] ring = t.ring;
        int n = ring == null ? 0 : (int) (end - from);
        int mask = ring == null ? 0 : ring.length / 2 - 1;
        long[] out = new long[2 + n * 2];
        out[0] = t.thread.getId();
        out[1] = t.dropped;
        for (int k = 0; k < n; k++) {
            int at = (int) ((from + k) & mask) * 2;
            out[2 + k * 2] = ring[at];
            out[3 + k * 2] = ring[at + 1];
        }
        t.taken = end;
        return out;
    }

    /** Trace mode: thread i's notes since the last call, the first one's index first. */
    public static String[] drainNotes(int i) {
        T t = frozen[i];
        long end = (long) NOTES_WRITTEN.getAcquire(t);
        long from = t.notesTaken;
        String[] n = t.notes;
        int count = n == null ? 0 : (int) (end - from);
        String[] out = new String[count + 1];
        out[0] = Long.toString(from);
        for (int k = 0; k < count; k++) {
            int at = (int) ((from + k) % n.length);
            out[k + 1] = n[at];
            n[at] = null;
        }
        t.notesTaken = end;
        return out;
    }

    /** Calls recorded so far, all threads (for status). */
    public static long calls() {
        synchronized (LOCK) {
            long sum = 0;
            for (int i = 0; i < threadCount; i++) sum += threads[i].calls;
            return sum;
        }
    }

    /** Contexts kept and the budget. */
    public static long[] stats() {
        synchronized (LOCK) {
            long used = nodes;
            for (int i = 0; i < threadCount; i++) used -= threads[i].budget;
            return new long[] {used, maxNodes};
        }
    }
}
