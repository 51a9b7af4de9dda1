package jvmprof.runtime;

/**
 * What Roots.calibrate times: the agent defines this class with loop (method id 0, a root) and
 * empty (id 1) instrumented by the root pass, and plainLoop/plainEmpty as they are. The bodies
 * do next to nothing, but something the compilers cannot remove.
 */
public final class RootsCalibration {
    private RootsCalibration() {}

    static int sink;

    public static void loop(int n) {
        for (int i = 0; i < n; i++) empty(i);
    }

    static void empty(int i) {
        sink += i;
    }

    public static void plainLoop(int n) {
        for (int i = 0; i < n; i++) plainEmpty(i);
    }

    static void plainEmpty(int i) {
        sink += i;
    }
}
