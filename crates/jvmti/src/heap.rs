//! Heap-related JVMTI calls: the allocation sampling interval, object tags for live-object
//! tracking, and a class histogram by heap iteration.

use crate::env::{Env, Error, JObject, Jni, Vm};
use jvmti_bindings::env::Jvmti;
use jvmti_bindings::sys::{jni, jvmti};
use std::ffi::c_void;

/// Instances and bytes of one class on the heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassCount {
    /// Class signature (`Ljava/lang/String;`, `[B`).
    pub signature: String,
    pub instances: u64,
    pub bytes: u64,
}

impl Env {
    /// Mean bytes between two SampledObjectAlloc events (0 samples every allocation).
    pub fn set_heap_sampling_interval(&self, bytes: i32) -> Result<(), Error> {
        self.jvmti()
            .set_heap_sampling_interval(bytes)
            .map_err(|e| Error {
                call: "SetHeapSamplingInterval",
                detail: e.to_string(),
            })
    }

    /// Whether `object` is an `int[]` of length 0: the hidden lock HotSpot creates for each class's
    /// initialisation (`InstanceKlass::_init_lock`). Java code can lock such an array too, but has
    /// no reason to; the JVM's own class-initialisation waits are not application contention.
    pub fn is_class_init_lock(&self, jni: &Jni, object: JObject) -> bool {
        if object.is_null() || self.object_class_signature(jni, object).as_deref() != Some("[I") {
            return false;
        }
        // SAFETY: `object` is a live local reference to an int[] (its class was just checked).
        unsafe { jni.env().get_array_length(object.0) == 0 }
    }

    /// The signature of an object's class.
    pub fn object_class_signature(&self, jni: &Jni, object: JObject) -> Option<String> {
        if object.is_null() {
            return None;
        }
        // SAFETY: `object` is a live local reference (JObject contract); the class comes back as a
        // local reference that is deleted below.
        let class = unsafe { jni.env().get_object_class(object.0) };
        if class.is_null() {
            return None;
        }
        // SAFETY: `class` is the live local reference just returned.
        let sig = unsafe { self.jvmti().get_class_signature(class) }
            .ok()
            .map(|(s, _)| s);
        jni.delete_local_ref(class);
        sig
    }

    /// Tags an object (needs the tag_objects capability).
    pub fn set_tag(&self, object: JObject, tag: i64) -> bool {
        // SAFETY: `object` is a live local reference (JObject contract).
        unsafe { self.jvmti().set_tag(object.0, tag) }.is_ok()
    }

    pub fn force_garbage_collection(&self) {
        let _ = self.jvmti().force_garbage_collection();
    }

    /// Which of `tags` still belong to live objects.
    pub fn live_tags(&self, jni: &Jni, tags: &[i64]) -> Vec<i64> {
        jni.with_local_frame(16, || match self.jvmti().get_objects_with_tags(tags) {
            Ok((objects, found)) => {
                for o in objects {
                    jni.delete_local_ref(o);
                }
                found
            }
            Err(_) => Vec::new(),
        })
    }
}

struct Histogram {
    counts: Vec<(u64, u64)>,
}

unsafe extern "system" fn count_object(
    class_tag: jni::jlong,
    size: jni::jlong,
    _tag_ptr: *mut jni::jlong,
    _length: jni::jint,
    user_data: *mut c_void,
) -> jni::jint {
    // SAFETY: user_data is the &mut Histogram passed to IterateThroughHeap below, which outlives
    // the iteration; the heap iteration calls back on one thread at a time.
    let h = unsafe { &mut *(user_data as *mut Histogram) };
    if let Some(c) = usize::try_from(class_tag)
        .ok()
        .and_then(|t| t.checked_sub(1))
        .and_then(|i| h.counts.get_mut(i))
    {
        c.0 += 1;
        c.1 += size.max(0) as u64;
    }
    0
}

impl Vm {
    /// Instances and bytes per class of every object on the heap, largest first. Uses a private
    /// JVMTI environment (tags are per environment), disposed afterwards.
    pub fn class_histogram(&self, jni: &Jni) -> Result<Vec<ClassCount>, Error> {
        let env = self.jvmti()?;
        let jvmti = env.jvmti();
        let mut caps = jvmti::jvmtiCapabilities::default();
        caps.set_can_tag_objects(true);
        let err = |call: &'static str| {
            move |e: jvmti::jvmtiError| Error {
                call,
                detail: e.to_string(),
            }
        };
        let result = (|| {
            jvmti
                .add_capabilities(&caps)
                .map_err(err("AddCapabilities"))?;
            jni.with_local_frame(16, || {
                let classes = jvmti
                    .get_loaded_classes()
                    .map_err(err("GetLoadedClasses"))?;
                let mut signatures = Vec::with_capacity(classes.len());
                for (i, class) in classes.iter().enumerate() {
                    // SAFETY: each class is a live local reference from GetLoadedClasses.
                    let sig = unsafe { jvmti.get_class_signature(*class) }
                        .map(|(s, _)| s)
                        .unwrap_or_default();
                    // SAFETY: as above; tags live in this private environment only.
                    let _ = unsafe { jvmti.set_tag(*class, i as i64 + 1) };
                    signatures.push(sig);
                }
                let mut h = Histogram {
                    counts: vec![(0, 0); signatures.len()],
                };
                let callbacks = jvmti::jvmtiHeapCallbacks {
                    heap_iteration_callback: Some(count_object),
                    ..Default::default()
                };
                // SAFETY: the callback matches jvmtiHeapIterationCallback and `h` outlives the
                // call; a null class means all classes.
                unsafe {
                    jvmti.iterate_through_heap(
                        0,
                        std::ptr::null_mut(),
                        &callbacks,
                        &mut h as *mut Histogram as *const c_void,
                    )
                }
                .map_err(err("IterateThroughHeap"))?;
                let mut out: Vec<ClassCount> = signatures
                    .into_iter()
                    .zip(h.counts)
                    .filter(|(_, (n, _))| *n > 0)
                    .map(|(signature, (instances, bytes))| ClassCount {
                        signature,
                        instances,
                        bytes,
                    })
                    .collect();
                out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.signature.cmp(&b.signature)));
                Ok(out)
            })
        })();
        // SAFETY: the private environment is used by nobody else and not used after this.
        let _ = unsafe { Jvmti::from_raw(jvmti.raw()).dispose_environment() };
        result
    }
}
