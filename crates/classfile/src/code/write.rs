//! Writing: the Code attribute body from a laid-out IR, with every frame re-encoded in its
//! most compact StackMapTable form, and [`ClassFile::set_code`].

use super::layout::Laid;
use super::{Code, CodeAttr, CodeAttrBody, Frame, Label, PLACEHOLDER_BASE, TypeTarget, VType};
use crate::bytes::{put_u2, put_u4};
use crate::class::ClassFile;
use crate::constant_pool::ConstantPool;
use crate::error::{Error, RawError, RawResult, Result};

impl Code {
    /// Lays the code out and encodes the Code attribute body. Errors (code too large, a jump
    /// that cannot be widened) leave nothing changed: the caller keeps the old attribute.
    pub fn encode(&self, cp: &mut ConstantPool, class: &str) -> Result<Vec<u8>> {
        self.encode_raw(cp).map_err(|e| e.in_class(class))
    }

    fn encode_raw(&self, cp: &mut ConstantPool) -> RawResult<Vec<u8>> {
        if cp.len() >= usize::from(PLACEHOLDER_BASE) - self.placeholders.len() {
            return Err(RawError::new(
                0,
                "constant pool too large for placeholder class indices",
            ));
        }
        let mut owned: Option<Code> = None;
        let (code, label_off) = loop {
            let c = owned.as_ref().unwrap_or(self);
            match c.layout()? {
                Laid::Done(code, offs) => break (code, offs),
                Laid::NeedTrampoline(i, offs) => {
                    let mut n = c.clone();
                    n.add_trampoline(i, &offs)?;
                    owned = Some(n);
                }
            }
        };
        let this = owned.as_ref().unwrap_or(self);
        let off = |l: Label| -> RawResult<u32> {
            label_off
                .get(l.0 as usize)
                .copied()
                .flatten()
                .ok_or_else(|| RawError::new(0, format!("label {} is used but never placed", l.0)))
        };
        let mut frame_bodies = Vec::new();
        for a in &this.attributes {
            if let CodeAttrBody::StackMap(frames) = &a.body {
                let mut b = Vec::new();
                this.write_frames(&mut b, frames, &off, cp)?;
                frame_bodies.push(b);
            }
        }
        let mut frame_bodies = frame_bodies.into_iter();
        let mut out = Vec::with_capacity(code.len() + 64);
        put_u2(&mut out, this.max_stack);
        put_u2(&mut out, this.max_locals);
        put_u4(&mut out, code.len() as u32);
        out.extend_from_slice(&code);
        put_u2(&mut out, this.handlers.len() as u16);
        for h in &this.handlers {
            let (s, e) = (off(h.start)?, off(h.end)?);
            if s >= e {
                return Err(RawError::new(
                    s as usize,
                    "empty exception range after layout",
                ));
            }
            put_u2(&mut out, s as u16);
            put_u2(&mut out, e as u16);
            put_u2(&mut out, off(h.handler)? as u16);
            put_u2(&mut out, h.catch_type);
        }
        let kept: Vec<&CodeAttr> = self
            .attributes
            .iter()
            .filter(|a| !matches!(a.body, CodeAttrBody::Other(_)))
            .collect();
        put_u2(&mut out, kept.len() as u16);
        for a in kept {
            let mut b = Vec::new();
            match &a.body {
                CodeAttrBody::LineNumbers(v) => {
                    put_u2(&mut b, v.len() as u16);
                    for (l, line) in v {
                        put_u2(&mut b, off(*l)? as u16);
                        put_u2(&mut b, *line);
                    }
                }
                CodeAttrBody::LocalVariables(v) | CodeAttrBody::LocalVariableTypes(v) => {
                    put_u2(&mut b, v.len() as u16);
                    for lv in v {
                        let (s, e) = (off(lv.start)?, off(lv.end)?);
                        put_u2(&mut b, s as u16);
                        put_u2(&mut b, e.saturating_sub(s) as u16);
                        put_u2(&mut b, lv.name_index);
                        put_u2(&mut b, lv.descriptor_index);
                        put_u2(&mut b, lv.index);
                    }
                }
                CodeAttrBody::StackMap(_) => b = frame_bodies.next().unwrap_or_default(),
                CodeAttrBody::TypeAnnotations(v) => {
                    put_u2(&mut b, v.len() as u16);
                    for t in v {
                        match &t.target {
                            TypeTarget::LocalVar(tt, table) => {
                                b.push(*tt);
                                put_u2(&mut b, table.len() as u16);
                                for (s, e, i) in table {
                                    let (s, e) = (off(*s)?, off(*e)?);
                                    put_u2(&mut b, s as u16);
                                    put_u2(&mut b, e.saturating_sub(s) as u16);
                                    put_u2(&mut b, *i);
                                }
                            }
                            TypeTarget::Catch(i) => {
                                b.push(0x42);
                                put_u2(&mut b, *i);
                            }
                            TypeTarget::Offset(tt, l) => {
                                b.push(*tt);
                                put_u2(&mut b, off(*l)? as u16);
                            }
                            TypeTarget::TypeArgument(tt, l, i) => {
                                b.push(*tt);
                                put_u2(&mut b, off(*l)? as u16);
                                b.push(*i);
                            }
                        }
                        b.extend_from_slice(&t.rest);
                    }
                }
                CodeAttrBody::Other(_) => continue,
            }
            put_u2(&mut out, a.name_index);
            put_u4(&mut out, b.len() as u32);
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    fn write_frames(
        &self,
        b: &mut Vec<u8>,
        frames: &[Frame],
        off: &dyn Fn(Label) -> RawResult<u32>,
        cp: &mut ConstantPool,
    ) -> RawResult<()> {
        let mut placed = Vec::with_capacity(frames.len());
        for f in frames {
            placed.push((off(f.label)?, f));
        }
        placed.sort_by_key(|p| p.0);
        put_u2(b, placed.len() as u16);
        let mut prev_locals: &[VType] = &self.initial_locals;
        let mut prev_off: Option<u32> = None;
        for (o, f) in placed {
            let delta = match prev_off {
                None => o,
                Some(p) if o > p => o - p - 1,
                Some(_) => {
                    return Err(RawError::new(
                        o as usize,
                        "two stack-map frames at one offset",
                    ));
                }
            };
            prev_off = Some(o);
            let delta = u16::try_from(delta)
                .map_err(|_| RawError::new(o as usize, "frame offset too large"))?;
            let same_locals = f.locals == prev_locals;
            let pl = prev_locals.len();
            let nl = f.locals.len();
            if same_locals && f.stack.is_empty() {
                if delta < 64 {
                    b.push(delta as u8);
                } else {
                    b.push(251);
                    put_u2(b, delta);
                }
            } else if same_locals && f.stack.len() == 1 {
                if delta < 64 {
                    b.push(64 + delta as u8);
                } else {
                    b.push(247);
                    put_u2(b, delta);
                }
                self.write_vtype(b, &f.stack[0], off, cp)?;
            } else if f.stack.is_empty()
                && nl < pl
                && pl - nl <= 3
                && f.locals[..] == prev_locals[..nl]
            {
                b.push((251 - (pl - nl)) as u8);
                put_u2(b, delta);
            } else if f.stack.is_empty()
                && nl > pl
                && nl - pl <= 3
                && f.locals[..pl] == *prev_locals
            {
                b.push((251 + (nl - pl)) as u8);
                put_u2(b, delta);
                for v in &f.locals[pl..] {
                    self.write_vtype(b, v, off, cp)?;
                }
            } else {
                b.push(255);
                put_u2(b, delta);
                put_u2(b, nl as u16);
                for v in &f.locals {
                    self.write_vtype(b, v, off, cp)?;
                }
                put_u2(b, f.stack.len() as u16);
                for v in &f.stack {
                    self.write_vtype(b, v, off, cp)?;
                }
            }
            prev_locals = &f.locals;
        }
        Ok(())
    }

    fn write_vtype(
        &self,
        b: &mut Vec<u8>,
        v: &VType,
        off: &dyn Fn(Label) -> RawResult<u32>,
        cp: &mut ConstantPool,
    ) -> RawResult<()> {
        match v {
            VType::Top => b.push(0),
            VType::Integer => b.push(1),
            VType::Float => b.push(2),
            VType::Double => b.push(3),
            VType::Long => b.push(4),
            VType::Null => b.push(5),
            VType::UninitializedThis => b.push(6),
            VType::Object(i) => {
                let i = &match self.placeholders.iter().find(|p| p.0 == *i) {
                    Some((_, name)) => cp.add_class(name)?,
                    None => *i,
                };
                if cp.class_name(*i).is_none() {
                    return Err(RawError::new(
                        0,
                        format!("frame type #{i} is not a Class constant"),
                    ));
                }
                b.push(7);
                put_u2(b, *i);
            }
            VType::Uninitialized(l) => {
                b.push(8);
                put_u2(b, off(*l)? as u16);
            }
        }
        Ok(())
    }
}

impl ClassFile {
    /// Replaces method `index`'s Code attribute with `code`. On error nothing changes.
    pub fn set_code(&mut self, index: usize, code: &Code) -> Result<()> {
        let name = self.name();
        let body = code.encode(&mut self.constant_pool, &name)?;
        let Some(ai) = self
            .methods
            .get(index)
            .and_then(|m| self.find_attribute(&m.attributes, "Code"))
        else {
            return Err(Error {
                class: name,
                offset: 0,
                what: format!("method #{index} has no Code"),
            });
        };
        self.methods[index].attributes[ai].data = body;
        Ok(())
    }
}
