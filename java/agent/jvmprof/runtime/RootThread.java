package jvmprof.runtime;

import jvmprof.runtime.Roots.Node;

/**
 * A thread's state in root-method profiling (see Roots): its calling-context tree (every node
 * by index, in creation order), the activations below a root on its stack with their start
 * times, their callees' corrected time and the calls below them, the nodes a root invocation
 * touched under a minimum latency, and in trace mode its event ring and notes (TraceRing), the
 * call tree it is in and the tasks it runs for other threads' trees (TraceTrees). Only its own
 * thread writes it; the agent reads it on its own thread (Roots' agent side, TraceRing.drain).
 */
final class RootThread {
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

    RootThread(Thread thread, int session) {
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
