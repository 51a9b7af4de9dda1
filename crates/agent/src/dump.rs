//! Thread dumps and class histograms, asked for by attach (`dump=FILE`, `heap=FILE`): every
//! thread's state, stack with lines, held monitors and the lock it waits for with its owner, then
//! every deadlock (cycle in the wait-for graph over monitors and ownable synchronizers). Written as
//! JSON for the CLI, which prints text or passes the JSON on.

use crate::symbols::type_name;
use jvmprof_jvmti::management::LockInfo;
use jvmprof_jvmti::{JavaThreadInfo, Jni, Vm};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};

#[derive(Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockRef {
    /// The lock object's class, e.g. `java.lang.Object`,
    /// `java.util.concurrent.locks.ReentrantLock$NonfairSync`.
    pub class: String,
    /// Identity hash code, hex: with the class it names one object.
    pub hash: String,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct StackFrame {
    /// `package.Class.method`.
    pub frame: String,
    pub line: u32,
    /// Monitors locked by this frame.
    pub locked: Vec<LockRef>,
}

#[derive(Serialize, Debug)]
pub struct Wait {
    /// `monitor_enter` (blocked on `synchronized`), `object_wait` (in `Object.wait`), `parked`
    /// (a `java.util.concurrent` lock or other park blocker) or `waiting`.
    pub kind: &'static str,
    pub lock: LockRef,
    /// The owning thread's name, when the lock has an owner.
    pub owner: Option<String>,
    pub owner_id: Option<i64>,
}

#[derive(Serialize, Debug)]
pub struct ThreadDump {
    pub name: String,
    /// `Thread.getId()`.
    pub id: i64,
    /// `Thread.State` name.
    pub state: String,
    pub daemon: bool,
    pub stack: Vec<StackFrame>,
    /// Ownable synchronizers (j.u.c locks) this thread holds.
    pub synchronizers: Vec<LockRef>,
    pub waiting_for: Option<Wait>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct Deadlock {
    /// The threads of the cycle, each waiting for a lock held by the next.
    pub threads: Vec<String>,
    /// `locks[i]` is the lock `threads[i]` waits for (held by `threads[i + 1]`).
    pub locks: Vec<LockRef>,
}

/// A virtual thread in a thread container (JDK 21+).
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct VirtualThreadDump {
    /// `Thread.threadId()`.
    pub id: i64,
    pub name: String,
    /// `Thread.State` name, as the JDK reports it (JDK 25); on JDK 21, which reports none, from
    /// the top frame: `TIMED_WAITING` in `VirtualThread.parkNanos`, `WAITING` in
    /// `VirtualThread.park`, else `RUNNABLE`.
    pub state: String,
    pub stack: Vec<StackFrame>,
}

/// A thread container (`jcmd Thread.dump_to_file`'s grouping): the root, an executor, a
/// structured task scope...; only those holding virtual threads.
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct Container {
    pub name: String,
    pub parent: Option<String>,
    pub owner: Option<String>,
    pub threads: Vec<VirtualThreadDump>,
}

#[derive(Serialize, Debug)]
pub struct Dump {
    /// Platform threads.
    pub threads: Vec<ThreadDump>,
    pub deadlocks: Vec<Deadlock>,
    /// Virtual threads by container (JDK 21+; empty on older JDKs).
    pub containers: Vec<Container>,
    pub virtual_threads: usize,
}

fn lock_ref(l: &LockInfo) -> LockRef {
    LockRef {
        class: l.class.clone(),
        hash: format!("{:08x}", l.identity_hash as u32),
    }
}

/// What a thread waiting on `lock` is doing, from its state and top frame.
fn wait_kind(t: &JavaThreadInfo) -> &'static str {
    let top = t.stack.first();
    let top_is = |class: &str, method: &str| {
        top.is_some_and(|(c, m, _)| c == class && m.starts_with(method))
    };
    if t.state == "BLOCKED" {
        "monitor_enter"
    } else if top_is("java.lang.Object", "wait") {
        "object_wait"
    } else if top_is("jdk.internal.misc.Unsafe", "park") || top_is("sun.misc.Unsafe", "park") {
        "parked"
    } else {
        "waiting"
    }
}

/// Takes the thread dump. Runs on an attached thread (the attach listener).
pub fn thread_dump(jni: &Jni) -> Result<Dump, String> {
    let infos = jni.dump_all_threads().map_err(|e| e.to_string())?;
    let names: HashMap<i64, String> = infos.iter().map(|t| (t.id, t.name.clone())).collect();
    let threads: Vec<ThreadDump> = infos
        .iter()
        .map(|t| {
            let mut stack: Vec<StackFrame> = t
                .stack
                .iter()
                .map(|(class, method, line)| StackFrame {
                    frame: format!("{class}.{method}"),
                    line: (*line).max(0) as u32,
                    locked: Vec::new(),
                })
                .collect();
            for (lock, depth) in &t.locked_monitors {
                if let Some(f) = usize::try_from(*depth).ok().and_then(|d| stack.get_mut(d)) {
                    f.locked.push(lock_ref(lock));
                }
            }
            let owner_id = (t.lock_owner_id >= 0).then_some(t.lock_owner_id);
            ThreadDump {
                name: t.name.clone(),
                id: t.id,
                state: t.state.clone(),
                daemon: t.daemon,
                stack,
                synchronizers: t.locked_synchronizers.iter().map(lock_ref).collect(),
                waiting_for: t.lock.as_ref().map(|l| Wait {
                    kind: wait_kind(t),
                    lock: lock_ref(l),
                    owner: owner_id.and_then(|o| names.get(&o).cloned()),
                    owner_id,
                }),
            }
        })
        .collect();
    let deadlocks = find_deadlocks(&threads);
    let platform: HashSet<i64> = threads.iter().map(|t| t.id).collect();
    let containers = virtual_containers(jni, &platform);
    let virtual_threads = containers.iter().map(|c| c.threads.len()).sum();
    Ok(Dump {
        threads,
        deadlocks,
        containers,
        virtual_threads,
    })
}

/// The virtual threads by container, from the JDK's JSON thread dump (JDK 21+; nothing on
/// older JDKs). It goes through a private file that is removed at once.
fn virtual_containers(jni: &Jni, platform: &HashSet<i64>) -> Vec<Container> {
    let dir = std::env::temp_dir();
    let file = dir.join(format!(
        "jvmprof-threads-{}-{}.json",
        std::process::id(),
        jvmprof_jvmti::os::monotonic_ns()
    ));
    let Some(path) = file.to_str() else {
        return Vec::new();
    };
    let text = jni
        .dump_threads_json(path)
        .ok()
        .and_then(|()| std::fs::read(&file).ok());
    let _ = std::fs::remove_file(&file);
    text.and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
        .map(|v| containers_of(&v, platform))
        .unwrap_or_default()
}

/// `java.base/java.lang.Thread.sleep(Thread.java:509)` as a frame (`java.lang.Thread.sleep`,
/// line 509; 0 when unknown, native or absent).
fn parse_frame(text: &str) -> StackFrame {
    let (head, tail) = text.split_once('(').unwrap_or((text, ""));
    let frame = head.rsplit('/').next().unwrap_or(head).to_string();
    let line = tail
        .trim_end_matches(')')
        .rsplit_once(':')
        .and_then(|(_, l)| l.parse().ok())
        .unwrap_or(0);
    StackFrame {
        frame,
        line,
        locked: Vec::new(),
    }
}

/// The containers of a JSON thread dump (`{"threadDump": {"threadContainers": [...]}}`) with
/// their virtual threads: those flagged `"virtual": true` (JDK 25), or, where the JDK flags none
/// (JDK 21), those not among the platform threads' ids.
pub fn containers_of(dump: &serde_json::Value, platform: &HashSet<i64>) -> Vec<Container> {
    let empty = Vec::new();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let list = dump["threadDump"]["threadContainers"]
        .as_array()
        .unwrap_or(&empty);
    list.iter()
        .filter_map(|c| {
            let threads: Vec<VirtualThreadDump> = c["threads"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter_map(|t| {
                    let id: i64 = t["tid"].as_str()?.parse().ok()?;
                    let is_virtual = t["virtual"]
                        .as_bool()
                        .unwrap_or_else(|| !platform.contains(&id));
                    if !is_virtual {
                        return None;
                    }
                    let stack: Vec<StackFrame> = t["stack"]
                        .as_array()
                        .unwrap_or(&empty)
                        .iter()
                        .filter_map(|f| f.as_str().map(parse_frame))
                        .collect();
                    let top = stack.first().map(|f| f.frame.as_str()).unwrap_or("");
                    let state = text(&t["state"]).unwrap_or_else(|| {
                        match top {
                            "java.lang.VirtualThread.parkNanos" => "TIMED_WAITING",
                            "java.lang.VirtualThread.park" => "WAITING",
                            _ => "RUNNABLE",
                        }
                        .to_string()
                    });
                    Some(VirtualThreadDump {
                        id,
                        name: text(&t["name"]).unwrap_or_default(),
                        state,
                        stack,
                    })
                })
                .collect();
            (!threads.is_empty()).then(|| Container {
                name: text(&c["container"]).unwrap_or_default(),
                parent: text(&c["parent"]),
                owner: text(&c["owner"]),
                threads,
            })
        })
        .collect()
}

/// Every cycle of the wait-for graph. Each thread waits for at most one lock, so following
/// "waits for a lock owned by" from any thread either ends or enters exactly one cycle.
pub fn find_deadlocks(threads: &[ThreadDump]) -> Vec<Deadlock> {
    let index: HashMap<i64, usize> = threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let next = |i: usize| -> Option<usize> {
        let w = threads[i].waiting_for.as_ref()?;
        if w.kind == "object_wait" {
            return None; // waiting for a notify, not for a lock
        }
        index.get(&w.owner_id?).copied()
    };
    let mut seen_cycles: BTreeSet<Vec<usize>> = BTreeSet::new();
    let mut out = Vec::new();
    for start in 0..threads.len() {
        let mut path = vec![start];
        let mut cur = start;
        while let Some(n) = next(cur) {
            if let Some(pos) = path.iter().position(|p| *p == n) {
                let cycle = path[pos..].to_vec();
                let mut key = cycle.clone();
                key.sort_unstable();
                if seen_cycles.insert(key) {
                    out.push(Deadlock {
                        threads: cycle.iter().map(|i| threads[*i].name.clone()).collect(),
                        locks: cycle
                            .iter()
                            .filter_map(|i| {
                                threads[*i].waiting_for.as_ref().map(|w| w.lock.clone())
                            })
                            .collect(),
                    });
                }
                break;
            }
            if path.len() > threads.len() {
                break;
            }
            path.push(n);
            cur = n;
        }
    }
    out
}

#[derive(Serialize, Debug)]
pub struct HeapClass {
    pub class: String,
    pub instances: u64,
    pub bytes: u64,
}

/// Live instances and bytes per class, largest first.
pub fn class_histogram(vm: &Vm, jni: &Jni) -> Result<Vec<HeapClass>, String> {
    let counts = vm.class_histogram(jni).map_err(|e| e.to_string())?;
    Ok(counts
        .into_iter()
        .map(|c| HeapClass {
            class: type_name(&c.signature),
            instances: c.instances,
            bytes: c.bytes,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, id: i64, waits: Option<(&'static str, &str, i64)>) -> ThreadDump {
        ThreadDump {
            name: name.into(),
            id,
            state: "BLOCKED".into(),
            daemon: false,
            stack: vec![],
            synchronizers: vec![],
            waiting_for: waits.map(|(kind, lock, owner)| Wait {
                kind,
                lock: LockRef {
                    class: lock.into(),
                    hash: "0".into(),
                },
                owner: None,
                owner_id: Some(owner),
            }),
        }
    }

    #[test]
    fn virtual_threads_come_by_container_on_jdk_21_and_25() {
        // JDK 21 flags no thread virtual and gives no state; JDK 25 does both.
        let dump = serde_json::json!({"threadDump": {"threadContainers": [
            {"container": "<root>", "parent": null, "owner": null, "threads": [
                {"tid": "1", "name": "main", "stack": ["java.base/java.lang.Thread.sleep0(Native Method)"]},
                {"tid": "18", "name": "vsleep-0", "stack": [
                    "java.base/java.lang.VirtualThread.parkNanos(Unknown Source)",
                    "D.lambda$main$0(D.java:4)"]}]},
            {"container": "java.util.concurrent.ThreadPerTaskExecutor@2732b882", "parent": "<root>",
             "owner": null, "threads": [
                {"tid": "28", "virtual": true, "name": "", "state": "WAITING", "stack": [
                    "java.base/java.lang.VirtualThread.park(VirtualThread.java:600)"]},
                {"tid": "29", "virtual": false, "name": "x", "stack": []}]},
            {"container": "ForkJoinPool-1/jdk.internal.vm.SharedThreadContainer@17998c9e",
             "parent": "<root>", "owner": null, "threads": [
                {"tid": "19", "name": "ForkJoinPool-1-worker-1", "stack": []}]}
        ]}});
        let platform: HashSet<i64> = [1, 19].into_iter().collect();
        let c = containers_of(&dump, &platform);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].name, "<root>");
        assert_eq!(c[0].threads.len(), 1);
        let v = &c[0].threads[0];
        assert_eq!(
            (v.id, v.name.as_str(), v.state.as_str()),
            (18, "vsleep-0", "TIMED_WAITING")
        );
        assert_eq!(v.stack[0].frame, "java.lang.VirtualThread.parkNanos");
        assert_eq!(
            (v.stack[1].frame.as_str(), v.stack[1].line),
            ("D.lambda$main$0", 4)
        );
        assert_eq!(c[1].parent.as_deref(), Some("<root>"));
        assert_eq!(c[1].threads.len(), 1);
        assert_eq!(c[1].threads[0].state, "WAITING");
        assert_eq!(c[1].threads[0].stack[0].line, 600);
    }

    #[test]
    fn finds_each_cycle_once_and_nothing_else() {
        let threads = vec![
            t("a", 1, Some(("monitor_enter", "L2", 2))),
            t("b", 2, Some(("monitor_enter", "L1", 1))),
            t("c", 3, Some(("parked", "S4", 4))),
            t("d", 4, Some(("parked", "S3", 3))),
            // e waits for a lock held by a sleeping f: not a deadlock.
            t("e", 5, Some(("monitor_enter", "L6", 6))),
            t("f", 6, None),
            // g waits on a monitor it will be notified on: not an edge.
            t("g", 7, Some(("object_wait", "L1", 1))),
            // h waits for a (deadlocked) thread but is not in the cycle.
            t("h", 8, Some(("monitor_enter", "L2", 2))),
        ];
        let d = find_deadlocks(&threads);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].threads, vec!["a", "b"]);
        assert_eq!(d[0].locks[0].class, "L2");
        assert_eq!(d[1].threads, vec!["c", "d"]);
    }
}
