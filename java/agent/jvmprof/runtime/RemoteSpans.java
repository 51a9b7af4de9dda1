package jvmprof.runtime;

import static jvmprof.runtime.Roots.*;
import static jvmprof.runtime.TraceRing.*;
import static jvmprof.runtime.TraceTrees.*;

import jvmprof.runtime.Roots.Node;

/**
 * Trace mode's remote calls (see Roots): the probes the agent puts into the JDK's RMI and HTTP
 * code open a span (an activation of REMOTE_METHOD) and log it with a note that identifies the
 * call on the other side: the RMI method or the HTTP call id the client adds to its request
 * (HEADER) and the server reads back.
 */
final class RemoteSpans {
    private RemoteSpans() {}

    static final int REMOTE_METHOD = -4;
    static final String CLIENT = "client", SERVER = "server", RMI = "rmi", HTTP = "http";
    /** The request header that carries an HTTP call's id from client to server. */
    static final String HEADER = "X-Jvmprof-Call";

    /** Opens a remote span (an activation) and logs it with its note. */
    static Node remote(RootThread t, String side, String protocol, String key, String label, Object o) {
        long at = note(t, side + "\u0000" + protocol + "\u0000" + key + "\u0000" + label);
        Node n = Activations.enter(t, REMOTE_METHOD);
        int d = t.depth;
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

    static boolean inRemote(RootThread t, String side, Object o) {
        return t.depth > 0 && t.stack[t.depth].method == REMOTE_METHOD && t.remoteObject == o;
    }

    /** UnicastRef.invoke(obj, method, params, opnum): the client side of an RMI call. */
    static Node rmiClient(Object method) {
        if (!on || !trace || !(method instanceof java.lang.reflect.Method)) return null;
        java.lang.reflect.Method m = (java.lang.reflect.Method) method;
        String name = m.getDeclaringClass().getName() + "." + m.getName();
        return remote(current(), CLIENT, RMI, name, name, null);
    }

    /** UnicastServerRef.dispatch(obj, call): the server side (not the registry's or DGC's). */
    static Node rmiServer(Object target) {
        if (!on || !trace || target == null) return null;
        String c = target.getClass().getName();
        if (c.startsWith("sun.rmi.") || c.startsWith("java.rmi.")) return null;
        return remote(current(), SERVER, RMI, "", c, null);
    }

    /** TCPConnection.getInputStream/getOutputStream: the RMI connection this thread uses. */
    static void rmiSocket(Object socket) {
        if (!on || !trace || !(socket instanceof java.net.Socket)) return;
        java.net.Socket s = (java.net.Socket) socket;
        RootThread t = current();
        String c = s.getLocalAddress().getHostAddress() + ":" + s.getLocalPort() + "\u0000"
                + s.getInetAddress().getHostAddress() + ":" + s.getPort();
        if (c.equals(t.lastConnection)) return;
        t.lastConnection = c;
        long at = note(t, c);
        if (at >= 0) log(t, (at << TAG_BITS) | CONNECTION, now(), 1, false);
    }

    static String newCallId(RootThread t) {
        return sessionId + "-" + t.thread.getId() + "-" + (++t.httpCalls);
    }

    /** HttpURLConnection's constructor: the request carries a new call id. */
    static void httpOpened(Object connection) {
        if (!on || !trace || !(connection instanceof java.net.URLConnection)) return;
        try {
            ((java.net.URLConnection) connection).setRequestProperty(HEADER, newCallId(current()));
        } catch (RuntimeException e) {
            // Already connected or refused: this call goes without an id.
        }
    }

    /** HttpURLConnection.getInputStream: the client span of the request (the outermost one). */
    static Node httpUrlCall(Object connection) {
        if (!on || !trace || !(connection instanceof java.net.HttpURLConnection)) return null;
        RootThread t = current();
        if (inRemote(t, CLIENT, connection)) return null;
        java.net.HttpURLConnection c = (java.net.HttpURLConnection) connection;
        String id = c.getRequestProperty(HEADER);
        return remote(t, CLIENT, HTTP, id == null ? "" : id,
                c.getRequestMethod() + " " + c.getURL(), connection);
    }

    /** HttpClient.send(request, handler): the request with a call id; the span is pending. */
    static Object httpSend(Object request) {
        if (!on || !trace || request == null) return request;
        RootThread t = current();
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
    static Node pending() {
        if (!on || !trace) return null;
        RootThread t = current();
        Node n = t.pending;
        t.pending = null;
        return n;
    }

    /** com.sun.net.httpserver Filter.Chain.doFilter(exchange): the server side (outermost). */
    static Node httpServe(Object exchange) {
        if (!on || !trace || exchange == null) return null;
        RootThread t = current();
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
}
