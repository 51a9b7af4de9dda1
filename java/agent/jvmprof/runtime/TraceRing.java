package jvmprof.runtime;

import static jvmprof.runtime.Roots.*;

/**
 * Trace mode's event log (see Roots): each thread's ring of events (an activation's entry and
 * exit with their times, remote spans, connections, tree contexts, thread names) and its ring
 * of notes (the strings events refer to), written by the thread alone and published to the
 * agent's drain with release stores. A ring starts small and doubles up to its bound; a call
 * that finds no room is dropped whole and counted.
 */
final class TraceRing {
    private TraceRing() {}

    /** Initializes this class (Roots does, with its own). */
    static void init() {}

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

    static void rings(RootThread t) {
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
    static void growRing(RootThread t) {
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
    static boolean log(RootThread t, long head, long time, int need, boolean opens) {
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
    static boolean room(RootThread t, long want) {
        rings(t);
        int cap = t.ring.length / 2;
        if (cap - (t.written - t.taken) >= want) return true;
        if (cap >= ringEvents) return false;
        growRing(t);
        return t.ring.length / 2 - (t.written - t.taken) >= want;
    }

    /** Writes one event (room checked) and publishes it to the agent's drain. */
    static void put(RootThread t, long head, long time) {
        long[] ring = t.ring;
        int at = (int) (t.written & (ring.length / 2 - 1)) * 2;
        ring[at] = head;
        ring[at + 1] = time;
        WRITTEN.setRelease(t, t.written + 1);
    }

    /** A note for an event: its index, or -1 when the notes ring is full. */
    static long note(RootThread t, String text) {
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

    static final java.lang.invoke.VarHandle WRITTEN;
    static final java.lang.invoke.VarHandle NOTES_WRITTEN;

    static {
        try {
            java.lang.invoke.MethodHandles.Lookup l = java.lang.invoke.MethodHandles.lookup();
            WRITTEN = l.findVarHandle(RootThread.class, "written", long.class);
            NOTES_WRITTEN = l.findVarHandle(RootThread.class, "notesWritten", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /**
     * Thread t's events since the last drain, pairs of longs (tag and payload, time), preceded
     * by the thread's id and its dropped calls so far.
     */
    static long[] drain(RootThread t) {
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

    /** Thread t's notes since the last call, the first one's index first. */
    static String[] drainNotes(RootThread t) {
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
}
