//! The constant pool: every tag through current class-file versions (JVMS 4.4).

use std::collections::HashMap;

use crate::bytes::{Cursor, put_u2, put_u4};
use crate::error::{RawError, RawResult};
use crate::mutf8;

/// One constant-pool entry. Strings keep their exact modified-UTF-8 bytes (validated on read),
/// so a read followed by a write is byte-identical.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Constant {
    /// Index 0 and the slot after a Long or Double.
    Unusable,
    Utf8(Vec<u8>),
    Integer(i32),
    /// Raw IEEE bits, so NaN payloads survive.
    Float(u32),
    Long(i64),
    /// Raw IEEE bits.
    Double(u64),
    Class(u16),
    String(u16),
    Fieldref(u16, u16),
    Methodref(u16, u16),
    InterfaceMethodref(u16, u16),
    NameAndType(u16, u16),
    MethodHandle(u8, u16),
    MethodType(u16),
    Dynamic(u16, u16),
    InvokeDynamic(u16, u16),
    Module(u16),
    Package(u16),
}

/// The constant pool, indexed as in the class file (index 0 unusable).
#[derive(Debug, Clone)]
pub struct ConstantPool {
    entries: Vec<Constant>,
    /// Entry → first index, built on the first `add_*` (reading never needs it).
    lookup: Option<HashMap<Constant, u16>>,
}

impl PartialEq for ConstantPool {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}
impl Eq for ConstantPool {}

impl Default for ConstantPool {
    fn default() -> Self {
        ConstantPool {
            entries: vec![Constant::Unusable],
            lookup: None,
        }
    }
}

impl ConstantPool {
    pub(crate) fn read(c: &mut Cursor) -> RawResult<ConstantPool> {
        let count = c.u2("constant_pool_count")?;
        if count == 0 {
            return Err(c.err("constant_pool_count is 0"));
        }
        let mut entries = Vec::with_capacity(usize::from(count));
        entries.push(Constant::Unusable);
        while entries.len() < usize::from(count) {
            let at = c.offset();
            let tag = c.u1("constant tag")?;
            let e = match tag {
                1 => {
                    let len = c.u2("Utf8 length")?;
                    let b = c.bytes(usize::from(len), "Utf8 bytes")?;
                    if let Err(i) = mutf8::decode(b) {
                        return Err(RawError::new(
                            at + 3 + i,
                            format!("constant #{}: malformed modified UTF-8", entries.len()),
                        ));
                    }
                    Constant::Utf8(b.to_vec())
                }
                3 => Constant::Integer(c.i4("Integer")?),
                4 => Constant::Float(c.u4("Float")?),
                5 => Constant::Long(
                    ((u64::from(c.u4("Long")?) << 32) | u64::from(c.u4("Long")?)) as i64,
                ),
                6 => Constant::Double(
                    (u64::from(c.u4("Double")?) << 32) | u64::from(c.u4("Double")?),
                ),
                7 => Constant::Class(c.u2("Class")?),
                8 => Constant::String(c.u2("String")?),
                9 => Constant::Fieldref(c.u2("Fieldref")?, c.u2("Fieldref")?),
                10 => Constant::Methodref(c.u2("Methodref")?, c.u2("Methodref")?),
                11 => Constant::InterfaceMethodref(
                    c.u2("InterfaceMethodref")?,
                    c.u2("InterfaceMethodref")?,
                ),
                12 => Constant::NameAndType(c.u2("NameAndType")?, c.u2("NameAndType")?),
                15 => Constant::MethodHandle(c.u1("MethodHandle")?, c.u2("MethodHandle")?),
                16 => Constant::MethodType(c.u2("MethodType")?),
                17 => Constant::Dynamic(c.u2("Dynamic")?, c.u2("Dynamic")?),
                18 => Constant::InvokeDynamic(c.u2("InvokeDynamic")?, c.u2("InvokeDynamic")?),
                19 => Constant::Module(c.u2("Module")?),
                20 => Constant::Package(c.u2("Package")?),
                t => {
                    return Err(RawError::new(
                        at,
                        format!("constant #{}: unknown tag {t}", entries.len()),
                    ));
                }
            };
            let wide = matches!(e, Constant::Long(_) | Constant::Double(_));
            entries.push(e);
            if wide {
                if entries.len() >= usize::from(count) {
                    return Err(RawError::new(at, "Long/Double constant in the last slot"));
                }
                entries.push(Constant::Unusable);
            }
        }
        let cp = ConstantPool {
            entries,
            lookup: None,
        };
        cp.check_references()
            .map_err(|w| RawError::new(c.offset(), w))?;
        Ok(cp)
    }

    /// Checks that every reference points to an entry of the right kind.
    fn check_references(&self) -> Result<(), String> {
        use Constant::*;
        let is = |i: u16, f: fn(&Constant) -> bool| self.entries.get(usize::from(i)).is_some_and(f);
        let utf8 = |c: &Constant| matches!(c, Utf8(_));
        let class = |c: &Constant| matches!(c, Class(_));
        let nat = |c: &Constant| matches!(c, NameAndType(..));
        for (n, e) in self.entries.iter().enumerate() {
            let ok = match *e {
                Class(i) | String(i) | MethodType(i) | Module(i) | Package(i) => is(i, utf8),
                Fieldref(a, b) | Methodref(a, b) | InterfaceMethodref(a, b) => {
                    is(a, class) && is(b, nat)
                }
                NameAndType(a, b) => is(a, utf8) && is(b, utf8),
                Dynamic(_, b) | InvokeDynamic(_, b) => is(b, nat),
                MethodHandle(kind, r) => {
                    (1..=9).contains(&kind)
                        && is(r, |c| {
                            matches!(c, Fieldref(..) | Methodref(..) | InterfaceMethodref(..))
                        })
                }
                _ => true,
            };
            if !ok {
                return Err(format!(
                    "constant #{n} ({e:?}) refers to a missing or wrong-kind entry"
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        put_u2(out, self.entries.len() as u16);
        for e in &self.entries {
            match e {
                Constant::Unusable => {}
                Constant::Utf8(b) => {
                    out.push(1);
                    put_u2(out, b.len() as u16);
                    out.extend_from_slice(b);
                }
                Constant::Integer(v) => {
                    out.push(3);
                    put_u4(out, *v as u32);
                }
                Constant::Float(v) => {
                    out.push(4);
                    put_u4(out, *v);
                }
                Constant::Long(v) => {
                    out.push(5);
                    out.extend_from_slice(&v.to_be_bytes());
                }
                Constant::Double(v) => {
                    out.push(6);
                    out.extend_from_slice(&v.to_be_bytes());
                }
                Constant::Class(i) => one(out, 7, *i),
                Constant::String(i) => one(out, 8, *i),
                Constant::Fieldref(a, b) => two(out, 9, *a, *b),
                Constant::Methodref(a, b) => two(out, 10, *a, *b),
                Constant::InterfaceMethodref(a, b) => two(out, 11, *a, *b),
                Constant::NameAndType(a, b) => two(out, 12, *a, *b),
                Constant::MethodHandle(k, r) => {
                    out.push(15);
                    out.push(*k);
                    put_u2(out, *r);
                }
                Constant::MethodType(i) => one(out, 16, *i),
                Constant::Dynamic(a, b) => two(out, 17, *a, *b),
                Constant::InvokeDynamic(a, b) => two(out, 18, *a, *b),
                Constant::Module(i) => one(out, 19, *i),
                Constant::Package(i) => one(out, 20, *i),
            }
        }
    }

    /// Number of slots, as `constant_pool_count`.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.len() <= 1
    }
    pub fn get(&self, index: u16) -> Option<&Constant> {
        self.entries.get(usize::from(index))
    }
    /// The raw modified-UTF-8 bytes of a Utf8 entry.
    pub fn utf8_bytes(&self, index: u16) -> Option<&[u8]> {
        match self.get(index)? {
            Constant::Utf8(b) => Some(b),
            _ => None,
        }
    }
    /// A Utf8 entry as a Rust string (lossy for unpaired surrogates).
    pub fn utf8(&self, index: u16) -> Option<String> {
        self.utf8_bytes(index).map(mutf8::to_string_lossy)
    }
    /// The internal name of a Class entry.
    pub fn class_name(&self, index: u16) -> Option<String> {
        match self.get(index)? {
            Constant::Class(n) => self.utf8(*n),
            _ => None,
        }
    }
    /// (class, name, descriptor) of a field or method reference.
    pub fn member_ref(&self, index: u16) -> Option<(String, String, String)> {
        let (c, nt) = match self.get(index)? {
            Constant::Fieldref(c, nt)
            | Constant::Methodref(c, nt)
            | Constant::InterfaceMethodref(c, nt) => (*c, *nt),
            _ => return None,
        };
        let (n, d) = self.name_and_type(nt)?;
        Some((self.class_name(c)?, n, d))
    }
    pub fn name_and_type(&self, index: u16) -> Option<(String, String)> {
        match self.get(index)? {
            Constant::NameAndType(n, d) => Some((self.utf8(*n)?, self.utf8(*d)?)),
            _ => None,
        }
    }

    fn find_or_push(&mut self, c: Constant) -> RawResult<u16> {
        let entries = &self.entries;
        let lookup = self.lookup.get_or_insert_with(|| {
            let mut m = HashMap::with_capacity(entries.len());
            for (i, e) in entries.iter().enumerate().skip(1) {
                if *e != Constant::Unusable {
                    m.entry(e.clone()).or_insert(i as u16);
                }
            }
            m
        });
        if let Some(i) = lookup.get(&c) {
            return Ok(*i);
        }
        let wide = matches!(c, Constant::Long(_) | Constant::Double(_));
        let need = if wide { 2 } else { 1 };
        if self.entries.len() + need > 0xFFFF {
            return Err(RawError::new(0, "constant pool full (65535 entries)"));
        }
        let i = self.entries.len() as u16;
        lookup.insert(c.clone(), i);
        self.entries.push(c);
        if wide {
            self.entries.push(Constant::Unusable);
        }
        Ok(i)
    }
    /// Drops entries added after the pool had `len` slots (undoing a failed rewrite).
    pub(crate) fn truncate(&mut self, len: usize) {
        if len >= 1 && len < self.entries.len() {
            self.entries.truncate(len);
            if let Some(m) = self.lookup.as_mut() {
                m.retain(|_, i| usize::from(*i) < len);
            }
        }
    }

    pub(crate) fn add_utf8(&mut self, s: &str) -> RawResult<u16> {
        self.find_or_push(Constant::Utf8(mutf8::encode(s)))
    }
    pub(crate) fn add_class(&mut self, name: &str) -> RawResult<u16> {
        let n = self.add_utf8(name)?;
        self.find_or_push(Constant::Class(n))
    }
    pub(crate) fn add_integer(&mut self, v: i32) -> RawResult<u16> {
        self.find_or_push(Constant::Integer(v))
    }
    pub(crate) fn add_methodref(&mut self, class: &str, name: &str, desc: &str) -> RawResult<u16> {
        let c = self.add_class(class)?;
        let n = self.add_utf8(name)?;
        let d = self.add_utf8(desc)?;
        let nt = self.find_or_push(Constant::NameAndType(n, d))?;
        self.find_or_push(Constant::Methodref(c, nt))
    }
    pub(crate) fn add_fieldref(&mut self, class: &str, name: &str, desc: &str) -> RawResult<u16> {
        let c = self.add_class(class)?;
        let n = self.add_utf8(name)?;
        let d = self.add_utf8(desc)?;
        let nt = self.find_or_push(Constant::NameAndType(n, d))?;
        self.find_or_push(Constant::Fieldref(c, nt))
    }
    /// Index of an existing Class entry for `name`, if any.
    pub(crate) fn find_class(&self, name: &str) -> Option<u16> {
        let enc = mutf8::encode(name);
        self.entries.iter().enumerate().find_map(|(i, e)| match e {
            Constant::Class(n) if self.utf8_bytes(*n) == Some(&enc[..]) => Some(i as u16),
            _ => None,
        })
    }
}

fn one(out: &mut Vec<u8>, tag: u8, a: u16) {
    out.push(tag);
    put_u2(out, a);
}
fn two(out: &mut Vec<u8>, tag: u8, a: u16, b: u16) {
    out.push(tag);
    put_u2(out, a);
    put_u2(out, b);
}
