package jvmprof.runtime;

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

/**
 * The probes that offline-instrumented code calls (jvmprof instrument); the agent's exact mode
 * has its own runtime (java/agent/jvmprof/runtime/Probes.java), with the same probe signatures
 * for the exact passes. Each thread keeps a calling-context tree (of ContextNode): enter(id) descends to the child for method id and counts a call,
 * exit(id) climbs back, block(n) adds n bytecodes to the current context. At JVM exit the trees
 * are written in collapsed format ("a;b;c value" per line) to the file named by the system
 * property jvmprof.output (default: standard error). jvmprof.value=bytecodes picks bytecode
 * counts instead of calls. Method names come from the resource jvmprof/runtime/methods.txt
 * (line i is method id i), written by the instrumenter.
 */
public final class OfflineProbes {
    private OfflineProbes() {}

    /**
     * A calling context (public: rewritten code keeps one in a local). Offline trees have no
     * node budget, so they never get a spill context.
     */
    public static final class Node extends ContextNode {
        final Node parent;

        Node(int method, Node parent) {
            super(method);
            this.parent = parent;
        }

        @Override
        protected boolean reserve() {
            return true;
        }

        @Override
        protected ContextNode newChild(int id) {
            return new Node(id, this);
        }

        @Override
        protected ContextNode spillCallee() {
            return this;
        }
    }

    private static final List<Node> ROOTS = new ArrayList<>();
    private static final ThreadLocal<Node[]> CURRENT = ThreadLocal.withInitial(() -> {
        Node root = new Node(-1, null);
        synchronized (ROOTS) {
            ROOTS.add(root);
        }
        return new Node[] {root};
    });

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(OfflineProbes::dump, "jvmprof-dump"));
    }

    public static void enter(int methodId) {
        Node[] cur = CURRENT.get();
        Node n = (Node) cur[0].child(methodId);
        n.calls++;
        cur[0] = n;
    }

    public static void exit(int methodId) {
        Node[] cur = CURRENT.get();
        Node n = cur[0];
        while (n.parent != null && n.method != methodId) n = n.parent;
        if (n.parent != null) cur[0] = n.parent;
    }

    public static void block(int count) {
        CURRENT.get()[0].bytecodes += count;
    }

    // The calling-context probes of the `exact` passes (the agent's runtime has the fast ones;
    // these keep offline-instrumented code runnable and the counts the same).

    public static Node open(int methodId) {
        Node[] cur = CURRENT.get();
        Node n = (Node) cur[0].child(methodId);
        n.calls++;
        cur[0] = n;
        return n;
    }

    public static void count(Node n, long bytecodes) {
        n.bytecodes += bytecodes;
    }

    public static void close(Node n, long bytecodes) {
        n.bytecodes += bytecodes;
        CURRENT.get()[0] = n.parent;
    }

    public static void restore(Node n) {
        if (n != null) CURRENT.get()[0] = n;
    }

    private static String[] names() {
        List<String> l = new ArrayList<>();
        try (InputStream in = OfflineProbes.class.getResourceAsStream("methods.txt")) {
            if (in != null) {
                BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
                for (String s; (s = r.readLine()) != null; ) l.add(s);
            }
        } catch (IOException e) {
            // names stay numeric
        }
        return l.toArray(new String[0]);
    }

    private static void dump() {
        boolean bytecodes = "bytecodes".equals(System.getProperty("jvmprof.value"));
        String[] names = names();
        Map<String, Long> lines = new TreeMap<>();
        synchronized (ROOTS) {
            for (Node root : ROOTS) {
                try {
                    collect(root, "", names, bytecodes, lines);
                } catch (RuntimeException e) {
                    // A thread still running changed its tree while we read it: skip its rest.
                }
            }
        }
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, Long> e : lines.entrySet()) sb.append(e.getKey()).append(' ').append(e.getValue()).append('\n');
        String out = System.getProperty("jvmprof.output");
        try {
            if (out == null) {
                System.err.print(sb);
            } else {
                try (Writer w = new OutputStreamWriter(new FileOutputStream(out), StandardCharsets.UTF_8)) {
                    w.write(sb.toString());
                }
            }
        } catch (IOException e) {
            System.err.println("jvmprof: cannot write " + out + ": " + e);
        }
    }

    private static void collect(ContextNode n, String path, String[] names, boolean bytecodes, Map<String, Long> lines) {
        String p = path;
        if (n.method >= 0) {
            String name = n.method < names.length ? names[n.method] : ("method#" + n.method);
            p = path.isEmpty() ? name : path + ";" + name;
        }
        long v = bytecodes ? n.bytecodes : n.calls;
        // Bytecodes run outside any instrumented method go to the line "[all]".
        if (v > 0) lines.merge(p.isEmpty() ? "[all]" : p, v, Long::sum);
        ContextNode[] kids = n.kids;
        if (kids == null) return;
        for (ContextNode c : kids) if (c != null) collect(c, p, names, bytecodes, lines);
    }
}
