//! Turns jmethodIDs and bytecode indices into profile frames, once per distinct (method, bci).
//! Runs on the agent's writer thread, never in a signal handler.

use jvmprof_jvmti::{Env, Jni, MethodId, MethodInfo};
use jvmprof_profile::{Frame, FrameKind, ProfileBuilder};
use std::collections::HashMap;

type FastHash = foldhash::fast::RandomState;

#[derive(Default)]
pub struct Symbols {
    methods: HashMap<MethodId, Option<MethodInfo>, FastHash>,
    /// Looked up for every frame of every sample not already cached by stack: hence foldhash.
    frames: HashMap<(MethodId, i64), u32, FastHash>,
    synthetic: HashMap<String, u32>,
}

impl Symbols {
    /// The profile frame of `method` at bytecode index `bci` (negative: native or unknown).
    pub fn java_frame(
        &mut self,
        env: &Env,
        jni: &Jni,
        builder: &mut ProfileBuilder,
        method: MethodId,
        bci: i64,
    ) -> u32 {
        if let Some(id) = self.frames.get(&(method, bci)) {
            return *id;
        }
        let info = self
            .methods
            .entry(method)
            .or_insert_with(|| env.method_info(jni, method));
        let frame = match info {
            Some(info) => Frame::java(
                &class_name(&info.class_signature),
                &info.name,
                &info.descriptor,
                if bci >= 0 { info.line_of(bci) } else { 0 },
            ),
            None => Frame::synthetic(FrameKind::Native, "[unknown method]"),
        };
        let id = builder.frame(frame);
        self.frames.insert((method, bci), id);
        id
    }

    /// A `[name]`-style frame the profiler adds.
    pub fn synthetic_frame(&mut self, builder: &mut ProfileBuilder, name: &str) -> u32 {
        if let Some(id) = self.synthetic.get(name) {
            return *id;
        }
        let id = builder.frame(Frame::synthetic(FrameKind::Synthetic, name));
        self.synthetic.insert(name.to_string(), id);
        id
    }
}

/// `Ljava/util/HashMap;` → `java.util.HashMap`. Hidden classes lose their `/0x…` address suffix
/// (`Foo$$Lambda/0x0000…` → `Foo$$Lambda`) so names are stable from run to run.
pub fn class_name(signature: &str) -> String {
    let body = signature
        .strip_prefix('L')
        .and_then(|s| s.strip_suffix(';'))
        .unwrap_or(signature);
    // The address suffix is `/0x…` in JDK 21+ signatures and `.0x…` in JDK 17's.
    let body = match body.rfind("/0x").or_else(|| body.rfind(".0x")) {
        Some(i) if body[i + 3..].chars().all(|c| c.is_ascii_hexdigit()) => &body[..i],
        _ => body,
    };
    body.replace('/', ".")
}

/// `[B` → `byte[]`, `Ljava/lang/String;` → `java.lang.String`, `[[Ljava/lang/Object;` →
/// `java.lang.Object[][]`.
pub fn type_name(signature: &str) -> String {
    let dims = signature.bytes().take_while(|b| *b == b'[').count();
    let elem = &signature[dims..];
    let base = match elem {
        "B" => "byte".to_string(),
        "C" => "char".to_string(),
        "D" => "double".to_string(),
        "F" => "float".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        "S" => "short".to_string(),
        "Z" => "boolean".to_string(),
        _ => class_name(elem),
    };
    format!("{base}{}", "[]".repeat(dims))
}

#[cfg(test)]
mod tests {
    use super::{class_name, type_name};

    #[test]
    fn type_names() {
        assert_eq!(type_name("[B"), "byte[]");
        assert_eq!(type_name("Ljava/lang/String;"), "java.lang.String");
        assert_eq!(type_name("[[Ljava/lang/Object;"), "java.lang.Object[][]");
        assert_eq!(type_name("[[I"), "int[][]");
    }

    #[test]
    fn class_names() {
        assert_eq!(class_name("Ljava/util/HashMap;"), "java.util.HashMap");
        assert_eq!(class_name("LOuter$Inner;"), "Outer$Inner");
        assert_eq!(
            class_name("Lcom/acme/Main$$Lambda/0x00007f3c8c00a000;"),
            "com.acme.Main$$Lambda"
        );
        assert_eq!(
            class_name("Lcom/acme/Main$$Lambda$14/0x0000000800c03000;"),
            "com.acme.Main$$Lambda$14"
        );
        assert_eq!(
            class_name("LCpuSplit$$Lambda$1.0x00007fa72c000a08;"),
            "CpuSplit$$Lambda$1"
        );
        assert_eq!(class_name("[I"), "[I");
    }
}
