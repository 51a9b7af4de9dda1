//! Thread dumps and class histograms, asked for by attach (`dump=FILE`, `heap=FILE`): every
//! thread's state, stack with lines, held monitors and the lock it waits for with its owner, then
//! every deadlock (cycle in the wait-for graph over monitors and ownable synchronizers). Written as
//! JSON for the CLI, which prints text or passes the JSON on.

use crate::symbols::type_name;
use jvmprof_jvmti::management::LockInfo;
use jvmprof_jvmti::{JavaThreadInfo, Jni, Vm};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

#[derive(Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockRef {
    /// The lock object's class, e.g. `java.lang.Object`,
    /// `java.util.concurrent.locks.ReentrantLock$NonfairSync`.
    pub class: String,
    /// Identity hash code, hex: with the class it names one object.
    pub hash: String,
}

#[derive(Serialize, Debug)]
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

#[derive(Serialize, Debug)]
pub struct Dump {
    pub threads: Vec<ThreadDump>,
    pub deadlocks: Vec<Deadlock>,
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
    Ok(Dump { threads, deadlocks })
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
