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
 * probes that log remote spans with what identifies the call on the other side.
 *
 * This class is the entry points (every probe rewritten code calls, every method the agent
 * calls), the session's settings and the registry of threads; the work is done by its parts:
 * RootThread (a thread's state), Activations (entering and leaving activations, their times),
 * TraceRing (trace mode's event log), TraceTrees (trace mode's call trees and task
 * hand-offs), RemoteSpans (remote calls) and ContextNode (java/shared: the context tree). The
 * agent defines them all in the boot loader with this class (crates/classfile subgraph.rs,
 * ROOTS_PARTS).
 *
 * Self-contained like Probes: no JDK method the agent may instrument, no lambdas.
 */
public final class Roots {
    private Roots() {}

    /** One calling context below a root (its children: ContextNode). */
    public static final class Node extends ContextNode {
        final int parent;
        final RootThread t;
        final int index;
        long selfNs, inclNs, min = Long.MAX_VALUE, max = Long.MIN_VALUE;
        double inclSq;
        // Pending (minimum latency): this root invocation's part, not yet kept.
        int epoch;
        long pCalls, pSelf, pBytecodes, pIncl, pMin, pMax;
        double pSq;

        Node(int method, Node parent, RootThread t) {
            super(method);
            this.parent = parent == null ? -1 : parent.index;
            this.t = t;
            this.index = t.register(this);
        }

        /** A marker outside the tree (a task's span token): no context, never exported. */
        Node(RootThread t, int method) {
            super(method);
            this.parent = -1;
            this.t = t;
            this.index = -1;
        }

        @Override
        protected boolean reserve() {
            return Roots.reserve(t);
        }

        @Override
        protected ContextNode newChild(int id) {
            return new Node(id, this, t);
        }

        /** Every call made in a spill context counts in it. */
        @Override
        protected ContextNode spillCallee() {
            return this;
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
    private static RootThread[] threads = new RootThread[16];
    private static int threadCount;
    private static RootThread[] frozen = new RootThread[0];
    private static int nodes;
    private static boolean full;
    private static final int CHUNK = 256;
    private static final ThreadLocal<RootThread> CURRENT = new ThreadLocal<RootThread>();
    private static final RootThread[] BY_ID = new RootThread[4096];

    // Registered by the agent (RegisterNatives) on this class.
    static native void reveal(int id);
    static native void reflected(Object method);
    static native long cpuNow();
    static native java.nio.ByteBuffer contextCell(long javaThreadId);

    static long now() {
        return cpu ? cpuNow() : System.nanoTime();
    }

    static RootThread current() {
        Thread th = Thread.currentThread();
        int slot = (int) th.getId() & (BY_ID.length - 1);
        RootThread t = BY_ID[slot];
        if (t != null && t.thread == th && t.session == session) return t;
        t = CURRENT.get();
        if (t == null || t.session != session) {
            t = new RootThread(th, session);
            synchronized (LOCK) {
                if (threadCount == threads.length) {
                    RootThread[] g = new RootThread[threads.length * 2];
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

    static boolean reserve(RootThread t) {
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

    static {
        // The parts' static state is made with this class's (on the agent's thread, before any
        // probe runs), as when they were all one class: not lazily inside a probe, where the
        // JDK code it runs might itself be instrumented.
        TraceRing.init();
        TraceTrees.init();
    }

    // ---- probes ----

    /** Entry of an instrumented method: its context if a root is on this thread's stack. */
    public static Node open(int id) {
        if (!on) return null;
        RootThread t = current();
        if (t.depth == 0 && !trace) return null;
        return Activations.push(t, id);
    }

    /** Entry of a root method: a new root invocation, or a nested call below one. */
    public static Node openRoot(int id) {
        if (!on) return null;
        RootThread t = current();
        if (t.depth == 0) {
            t.epoch++;
            t.nTouched = 0;
        }
        return Activations.push(t, id);
    }

    /** Bytecodes the method executed since its last hand-over (before a call). */
    public static void count(Node n, long bytecodes) {
        if (n == null) return;
        if (minLatency == 0) {
            n.bytecodes += bytecodes;
        } else {
            RootThread t = n.t;
            if (n.epoch != t.epoch) t.touch(n);
            n.pBytecodes += bytecodes;
        }
    }

    /** Exit (normal or exceptional) of an instrumented method. */
    public static void close(Node n, long bytecodes) {
        // Outside every root (n is null) this is all a compiled method runs: small enough to
        // be inlined everywhere, the rest out of line.
        if (n != null) Activations.leave(n, bytecodes);
    }

    /** Exception handler entry: the catching frame's activation is the current one again. */
    public static void restore(Node n) {
        if (n == null) return;
        RootThread t = n.t;
        int d = t.depth;
        if (d == 0 || t.stack[d] == n) return;
        int k = d;
        while (k > 0 && t.stack[k] != n) k--;
        if (k == 0) return;
        long end = now();
        while (t.depth > k) Activations.pop(t, end, 0);
    }

    /** Before {@code Method.invoke} in an instrumented method: reveal the reflective callee. */
    public static void reflect(java.lang.reflect.Method m) {
        if (!on || m == null) return;
        RootThread t = current();
        if (t.depth == 0 || t.lastReflected == m) return;
        t.lastReflected = m;
        long a = now();
        reflected(m);
        Activations.shift(t, now() - a);
    }

    // ---- trace mode: task hand-offs (TraceTrees) and remote calls (RemoteSpans) ----

    /** A task object created on this thread (a constructor's end): it runs in this tree. */
    public static void handedOff(Object task) {
        TraceTrees.handedOff(task);
    }

    /** A task submitted on this thread (an executor's execute): it runs in this tree. */
    public static Node handOff(Object task) {
        return TraceTrees.handOff(task);
    }

    /** A task's run method starts (FutureTask, CompletableFuture's async tasks): its span. */
    public static Node taskRun(Object task) {
        return TraceTrees.taskRun(task);
    }

    /** ThreadPoolExecutor.beforeExecute(thread, task): the worker starts a task. */
    public static void taskBegin(Object task) {
        TraceTrees.taskBegin(task);
    }

    /** ThreadPoolExecutor.afterExecute(task, thrown): the worker is done with it. */
    public static void taskEnd(Object task) {
        TraceTrees.taskEnd(task);
    }

    /** UnicastRef.invoke(obj, method, params, opnum): the client side of an RMI call. */
    public static Node rmiClient(Object method) {
        return RemoteSpans.rmiClient(method);
    }

    /** UnicastServerRef.dispatch(obj, call): the server side (not the registry's or DGC's). */
    public static Node rmiServer(Object target) {
        return RemoteSpans.rmiServer(target);
    }

    /** TCPConnection.getInputStream/getOutputStream: the RMI connection this thread uses. */
    public static void rmiSocket(Object socket) {
        RemoteSpans.rmiSocket(socket);
    }

    /** HttpURLConnection's constructor: the request carries a new call id. */
    public static void httpOpened(Object connection) {
        RemoteSpans.httpOpened(connection);
    }

    /** HttpURLConnection.getInputStream: the client span of the request (the outermost one). */
    public static Node httpUrlCall(Object connection) {
        return RemoteSpans.httpUrlCall(connection);
    }

    /** HttpClient.send(request, handler): the request with a call id; the span is pending. */
    public static Object httpSend(Object request) {
        return RemoteSpans.httpSend(request);
    }

    /** The span httpSend opened (null if none). */
    public static Node pending() {
        return RemoteSpans.pending();
    }

    /** com.sun.net.httpserver Filter.Chain.doFilter(exchange): the server side (outermost). */
    public static Node httpServe(Object exchange) {
        return RemoteSpans.httpServe(exchange);
    }

    // ---- the agent's side (JNI, on its own thread) ----

    /** Set by the agent: cpu or wall samples are taken, so threads publish their trees. */
    public static void setLinkSamples(boolean value) {
        TraceTrees.linkSamples = value;
    }

    /** Starts a session: fresh trees, the settings, the revealed flags cleared. */
    public static void begin(boolean cpuTimer, long minLatencyNs, int budget, boolean traceMode,
            int events, String sessionName) {
        synchronized (LOCK) {
            on = false;
            session++;
            threads = new RootThread[16];
            threadCount = 0;
            frozen = new RootThread[0];
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
        RootThread saved = BY_ID[slot];
        long[] inners = new long[rounds];
        long[] outers = new long[rounds];
        try {
            for (int r = 0; r < rounds; r++) {
                RootThread t = new RootThread(th, session);
                t.budget = 16;
                BY_ID[slot] = t;
                RootsCalibration.loop(n);
                long a = now();
                RootsCalibration.plainLoop(n);
                long plain = now() - a;
                Node loop = (Node) t.top.find(0);
                Node empty = loop == null ? null : (Node) loop.find(1);
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
            RootThread[] f = new RootThread[threadCount];
            System.arraycopy(threads, 0, f, 0, threadCount);
            frozen = f;
            return f.length;
        }
    }

    public static String threadName(int i) {
        RootThread t = frozen[i];
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
        RootThread t = frozen[i];
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
        return TraceRing.drain(frozen[i]);
    }

    /** Trace mode: thread i's notes since the last call, the first one's index first. */
    public static String[] drainNotes(int i) {
        return TraceRing.drainNotes(frozen[i]);
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
