//! Method descriptors: the parameter list, and the implicit frame at offset 0 that compact
//! stack-map frames are relative to.

use super::{PLACEHOLDER_BASE, Placeholders, VType};
use crate::class::ACC_STATIC;
use crate::constant_pool::ConstantPool;
use crate::error::{RawError, RawResult};

/// The implicit frame at offset 0: `this` (or `uninitializedThis` in a constructor other than
/// Object's) and the parameters, long/double as one entry each.
pub(crate) fn initial_frame(
    cp: &ConstantPool,
    this_class: u16,
    access: u16,
    name: &str,
    desc: &str,
) -> RawResult<(Vec<VType>, Placeholders)> {
    let mut v = Vec::new();
    let mut placeholders: Vec<(u16, String)> = Vec::new();
    if access & ACC_STATIC == 0 {
        let is_object = cp.class_name(this_class).as_deref() == Some("java/lang/Object");
        v.push(if name == "<init>" && !is_object {
            VType::UninitializedThis
        } else {
            VType::Object(this_class)
        });
    }
    let params = parse_params(desc)
        .ok_or_else(|| RawError::new(0, format!("bad method descriptor {desc}")))?;
    for p in params {
        v.push(match p.as_bytes()[0] {
            b'B' | b'C' | b'I' | b'S' | b'Z' => VType::Integer,
            b'F' => VType::Float,
            b'J' => VType::Long,
            b'D' => VType::Double,
            _ => {
                let n = if p.starts_with('L') {
                    &p[1..p.len() - 1]
                } else {
                    &p[..]
                };
                match cp.find_class(n) {
                    Some(i) => VType::Object(i),
                    None => {
                        // Not in the pool: a placeholder index, resolved only if a frame must
                        // spell this type out (see `Code::encode`).
                        let ph = PLACEHOLDER_BASE - placeholders.len() as u16;
                        placeholders.push((ph, n.to_string()));
                        VType::Object(ph)
                    }
                }
            }
        });
    }
    Ok((v, placeholders))
}

/// The parameter descriptors of a method descriptor, e.g. `(I[JLa/B;)V` → `I`, `[J`, `La/B;`.
pub fn parse_params(desc: &str) -> Option<Vec<String>> {
    let b = desc.as_bytes();
    if b.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let mut v = Vec::new();
    while *b.get(i)? != b')' {
        let start = i;
        while *b.get(i)? == b'[' {
            i += 1;
        }
        match *b.get(i)? {
            b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' => i += 1,
            b'L' => {
                while *b.get(i)? != b';' {
                    i += 1;
                }
                i += 1;
            }
            _ => return None,
        }
        v.push(desc.get(start..i)?.to_string());
    }
    Some(v)
}
