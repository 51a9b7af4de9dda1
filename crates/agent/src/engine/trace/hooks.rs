//! Trace mode's probes in the JDK's remote-call code ([`hooks_for`]): each records its side of a
//! call with what identifies it without a clock: RMI clients (`UnicastRef.invoke`, the remote
//! method), RMI servers (`UnicastServerRef.dispatch`), the TCP connection each RMI call uses
//! (`TCPConnection`'s streams), HTTP clients (`HttpURLConnection`, `HttpClient.send`: a request
//! header carrying the call's id) and `com.sun.net.httpserver` (`Filter.Chain`, which reads that
//! header); and the executors' hand-offs (`FutureTask`, `CompletableFuture`'s async tasks,
//! `ThreadPoolExecutor`), so that a task runs in the call tree it was made in.

use jvmprof_classfile::subgraph::Hook;

/// Local variable slots of the hooked methods' arguments (`this` is 0).
const THIS: &[u16] = &[0];
const ARG1: &[u16] = &[1];
const ARG2: &[u16] = &[2];

/// A task object's constructor: it belongs to the creating thread's call tree.
const TASK_MADE: Hook<'static> = Hook::BeforeReturn {
    call: "handedOff",
    args: THIS,
};
/// A task's run method: the worker runs it in the tree it was made in.
const TASK_RUN: Hook<'static> = Hook::Span {
    call: "taskRun",
    args: THIS,
};

/// The remote-call probes for a JDK class (internal name), if it has any.
pub fn hooks_for(class: &str) -> Option<&'static [(&'static str, &'static str, Hook<'static>)]> {
    const SOCKET: Hook<'static> = Hook::EntryField {
        call: "rmiSocket",
        field: "socket",
        descriptor: "Ljava/net/Socket;",
    };
    Some(match class {
        "sun/rmi/server/UnicastRef" => &[(
            "invoke",
            "(Ljava/rmi/Remote;Ljava/lang/reflect/Method;[Ljava/lang/Object;J)Ljava/lang/Object;",
            Hook::Span {
                call: "rmiClient",
                args: ARG2,
            },
        )],
        "sun/rmi/server/UnicastServerRef" => &[(
            "dispatch",
            "(Ljava/rmi/Remote;Ljava/rmi/server/RemoteCall;)V",
            Hook::Span {
                call: "rmiServer",
                args: ARG1,
            },
        )],
        "sun/rmi/transport/tcp/TCPConnection" => &[
            ("getOutputStream", "()Ljava/io/OutputStream;", SOCKET),
            ("getInputStream", "()Ljava/io/InputStream;", SOCKET),
        ],
        "sun/net/www/protocol/http/HttpURLConnection" => &[
            (
                "<init>",
                "(Ljava/net/URL;Ljava/net/Proxy;Lsun/net/www/protocol/http/Handler;)V",
                Hook::BeforeReturn {
                    call: "httpOpened",
                    args: THIS,
                },
            ),
            (
                "getInputStream",
                "()Ljava/io/InputStream;",
                Hook::Span {
                    call: "httpUrlCall",
                    args: THIS,
                },
            ),
        ],
        "jdk/internal/net/http/HttpClientImpl" => &[(
            "send",
            "(Ljava/net/http/HttpRequest;Ljava/net/http/HttpResponse$BodyHandler;)Ljava/net/http/HttpResponse;",
            Hook::SpanReplacing {
                call: "httpSend",
                arg: 1,
                class: "java/net/http/HttpRequest",
            },
        )],
        // Executor hand-offs: a task made or submitted in a call tree runs in that tree on the
        // worker (its samples carry the tree's id). A task object is noted when it is created
        // (FutureTask, CompletableFuture's async tasks) or submitted (ThreadPoolExecutor's
        // execute, for plain Runnables), and taken when it starts running.
        "java/util/concurrent/FutureTask" => &[
            ("<init>", "(Ljava/util/concurrent/Callable;)V", TASK_MADE),
            (
                "<init>",
                "(Ljava/lang/Runnable;Ljava/lang/Object;)V",
                TASK_MADE,
            ),
            ("run", "()V", TASK_RUN),
        ],
        "java/util/concurrent/CompletableFuture$AsyncSupply" => &[
            (
                "<init>",
                "(Ljava/util/concurrent/CompletableFuture;Ljava/util/function/Supplier;)V",
                TASK_MADE,
            ),
            ("run", "()V", TASK_RUN),
        ],
        "java/util/concurrent/CompletableFuture$AsyncRun" => &[
            (
                "<init>",
                "(Ljava/util/concurrent/CompletableFuture;Ljava/lang/Runnable;)V",
                TASK_MADE,
            ),
            ("run", "()V", TASK_RUN),
        ],
        "java/util/concurrent/ThreadPoolExecutor" => &[
            (
                "execute",
                "(Ljava/lang/Runnable;)V",
                Hook::Span {
                    call: "handOff",
                    args: ARG1,
                },
            ),
            (
                "beforeExecute",
                "(Ljava/lang/Thread;Ljava/lang/Runnable;)V",
                Hook::BeforeReturn {
                    call: "taskBegin",
                    args: ARG2,
                },
            ),
            (
                "afterExecute",
                "(Ljava/lang/Runnable;Ljava/lang/Throwable;)V",
                Hook::BeforeReturn {
                    call: "taskEnd",
                    args: ARG1,
                },
            ),
        ],
        "com/sun/net/httpserver/Filter$Chain" => &[(
            "doFilter",
            "(Lcom/sun/net/httpserver/HttpExchange;)V",
            Hook::Span {
                call: "httpServe",
                args: ARG1,
            },
        )],
        _ => return None,
    })
}

/// Every class with remote-call probes.
pub const HOOKED: &[&str] = &[
    "sun/rmi/server/UnicastRef",
    "sun/rmi/server/UnicastServerRef",
    "sun/rmi/transport/tcp/TCPConnection",
    "sun/net/www/protocol/http/HttpURLConnection",
    "jdk/internal/net/http/HttpClientImpl",
    "com/sun/net/httpserver/Filter$Chain",
    "java/util/concurrent/FutureTask",
    "java/util/concurrent/CompletableFuture$AsyncSupply",
    "java/util/concurrent/CompletableFuture$AsyncRun",
    "java/util/concurrent/ThreadPoolExecutor",
];
