//! Calibration: the probes' own cost on this JVM, timed once per session on the writer thread
//! (`RootsCalibration.loop`, a root, calling `empty` below it) and handed to the runtime, which
//! takes it out of every call's time.

use crate::say::say;
use jvmprof_jvmti::Jni;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::hierarchy::JValue;

/// Calibration: rounds (the first half warms up) and calls per round.
const ROUNDS: i32 = 60;
const CALLS_PER_ROUND: i32 = 20_000;

/// Times the probes on this JVM; (inner, outer) in ns, or zeros (and a note) if it failed.
pub fn calibrate(jni: &Jni, roots: GlobalRef) -> (f64, f64) {
    for id in [0, 1] {
        jni.call_static_void(roots, "markRevealed", "(I)V", &[JValue::Int(id)]);
    }
    let v = jni.call_static_long_array(roots, "calibrate", "(II)[J", &[ROUNDS, CALLS_PER_ROUND]);
    match v {
        Some(v) if v.len() == 2 => {
            jni.call_static_void(
                roots,
                "setCorrection",
                "(JJ)V",
                &[JValue::Long(v[0]), JValue::Long(v[1])],
            );
            (v[0] as f64 / 256.0, v[1] as f64 / 256.0)
        }
        _ => {
            say("root session: the probes could not be calibrated; times include their cost");
            (0.0, 0.0)
        }
    }
}
