package jvmprof.runtime;

import static jvmprof.runtime.Roots.*;
import static jvmprof.runtime.TraceRing.*;

import jvmprof.runtime.Roots.Node;

/**
 * Trace mode's call trees (see Roots): the tree a thread's outermost activation begins (its
 * own, numbered on the thread, or the tree of the task it runs for another thread), published
 * to the samplers through the thread's context cell, and the hand-over of tasks (executors,
 * FutureTask, CompletableFuture) from the thread that submits them to the one that runs them.
 */
final class TraceTrees {
    private TraceTrees() {}

    /** Initializes this class (Roots does, with its own). */
    static void init() {}

    /** Method id of a task's span token (see taskRun). */
    static final int TASK = -5;
    /** Set by the agent: cpu or wall samples are taken, so threads publish their trees. */
    static volatile boolean linkSamples;
    /** A thread's trees are numbered 1..TREE_MASK (then again from 1): 28 bits. */
    static final int TREE_MASK = (1 << 28) - 1;
    /** Where an ENTER carries its tree number: above the method id's 32 bits and the tag. */
    static final int TREE_SHIFT = 35;

    /**
     * The tree a thread's outermost activation begins: the tree of the task the thread runs for
     * another thread, or a new one, numbered on the thread ({@code thread id << 30 | n}).
     */
    static long openTree(RootThread t) {
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
    static void publish(RootThread t, long id) {
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
    static final java.util.IdentityHashMap<Object, Long> TASKS =
            new java.util.IdentityHashMap<Object, Long>();
    /** TASKS' size, read without the lock: workers skip the lock while nothing is pending. */
    static volatile int pendingTasks;
    static final int MAX_TASKS = 1 << 16;
    /** Hand-offs forgotten because too many tasks waited at once. */
    static long lostHandOffs;

    /** A task object created on this thread (a constructor's end): it runs in this tree. */
    static void handedOff(Object task) {
        handOff(task);
    }

    /** A task submitted on this thread (an executor's execute): it runs in this tree. */
    static Node handOff(Object task) {
        if (!on || !trace || task == null) return null;
        RootThread t = current();
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
    static long takeTask(Object task) {
        if (pendingTasks == 0) return 0;
        synchronized (TASKS) {
            Long v = TASKS.remove(task);
            pendingTasks = TASKS.size();
            return v == null ? 0 : v.longValue();
        }
    }

    /** The thread starts running a task for tree {@code id}. */
    static void beginTask(RootThread t, Object task, long id) {
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
    static void endTask(RootThread t) {
        int k = t.tasks - 1;
        if (k < 0) return;
        t.tasks = k;
        t.taskOf[k] = null;
        t.inherited = t.savedInherited[k];
        publish(t, t.savedContext[k]);
    }

    /** A task's run method starts (FutureTask, CompletableFuture's async tasks): its span. */
    static Node taskRun(Object task) {
        if (!on || !trace || task == null) return null;
        long id = takeTask(task);
        if (id == 0) return null;
        RootThread t = current();
        beginTask(t, task, id);
        if (t.taskToken == null) t.taskToken = new Node(t, TASK);
        return t.taskToken;
    }

    /** ThreadPoolExecutor.beforeExecute(thread, task): the worker starts a task. */
    static void taskBegin(Object task) {
        if (!on || !trace || task == null) return;
        long id = takeTask(task);
        if (id != 0) beginTask(current(), task, id);
    }

    /** ThreadPoolExecutor.afterExecute(task, thrown): the worker is done with it. */
    static void taskEnd(Object task) {
        if (!on || !trace || task == null) return;
        RootThread t = current();
        if (t.tasks > 0 && t.taskOf[t.tasks - 1] == task) endTask(t);
    }
}
