//! Editing the IR: inserting instructions (keeping `Uninitialized` and type-annotation
//! references on their instruction), adding frames and adding locals.

use std::collections::{HashMap, HashSet};

use super::{Code, CodeAttr, CodeAttrBody, Frame, Insn, Label, TypeTarget, VType};
use crate::constant_pool::ConstantPool;
use crate::error::{Error, Result};

impl Code {
    /// Adds a frame, creating the StackMapTable attribute if needed.
    pub fn add_frame(&mut self, cp: &mut ConstantPool, frame: Frame) -> Result<()> {
        if let Some(f) = self.frames_mut() {
            f.push(frame);
            return Ok(());
        }
        let name_index = cp
            .add_utf8("StackMapTable")
            .map_err(|e| e.in_class("<pool>"))?;
        self.attributes.push(CodeAttr {
            name_index,
            body: CodeAttrBody::StackMap(vec![frame]),
        });
        Ok(())
    }

    /// Allocates a new local variable of type `t` and declares it in every existing frame, so
    /// that it stays usable across branch targets without any type inference. The caller must
    /// store it before the first frame position (e.g. in code inserted at index 0).
    /// Returns the slot.
    pub fn add_local(&mut self, t: VType) -> Result<u16> {
        let err = |what: &str| Error {
            class: String::new(),
            offset: 0,
            what: what.to_string(),
        };
        let slot = self.max_locals;
        let size: u16 = if matches!(t, VType::Long | VType::Double) {
            2
        } else {
            1
        };
        self.max_locals = slot
            .checked_add(size)
            .ok_or_else(|| err("too many locals"))?;
        if let Some(frames) = self.frames_mut() {
            for f in frames {
                let mut slots: u32 = f
                    .locals
                    .iter()
                    .map(|v| {
                        if matches!(v, VType::Long | VType::Double) {
                            2
                        } else {
                            1
                        }
                    })
                    .sum();
                if slots > u32::from(slot) {
                    return Err(err("a frame has more locals than max_locals"));
                }
                while slots < u32::from(slot) {
                    f.locals.push(VType::Top);
                    slots += 1;
                }
                f.locals.push(t);
            }
        }
        Ok(slot)
    }

    /// Inserts `code` just before the real instruction at `pos` (after the labels that precede
    /// it, so jumps to that instruction now run `code` first). References that must point at the
    /// instruction itself (`Uninitialized(new)` and type-annotation offsets) are moved to a
    /// fresh label placed right before it.
    pub fn insert_before(&mut self, pos: usize, code: Vec<Insn>) {
        self.insert_many(vec![(pos, code)]);
    }

    /// [`Code::insert_before`] for many positions at once (indices into the current `insns`,
    /// each at most once), in one pass over the code.
    pub fn insert_many(&mut self, mut inserts: Vec<(usize, Vec<Insn>)>) {
        inserts.sort_by_key(|x| x.0);
        let pinned = self.instruction_refs();
        let mut remap: HashMap<Label, Label> = HashMap::new();
        let old = std::mem::take(&mut self.insns);
        let extra: usize = inserts.iter().map(|x| x.1.len() + 1).sum();
        let mut out = Vec::with_capacity(old.len() + extra);
        let mut next = inserts.into_iter().peekable();
        for (i, insn) in old.into_iter().enumerate() {
            while let Some((_, code)) = next.next_if(|x| x.0 == i) {
                // Labels directly before this instruction that something pins to it.
                let mut k = out.len();
                let mut pinned_here = Vec::new();
                while k > 0 {
                    match out[k - 1] {
                        Insn::Label(l) => {
                            if pinned.contains(&l) {
                                pinned_here.push(l);
                            }
                            k -= 1;
                        }
                        _ => break,
                    }
                }
                out.extend(code);
                if !pinned_here.is_empty() {
                    let fresh = self.new_label();
                    for l in pinned_here {
                        remap.insert(l, fresh);
                    }
                    out.push(Insn::Label(fresh));
                }
            }
            out.push(insn);
        }
        // Insertions at the end (index == len).
        for (_, code) in next {
            out.extend(code);
        }
        self.insns = out;
        if !remap.is_empty() {
            self.retarget_instruction_refs(&remap);
        }
    }

    /// Labels that must stay on their instruction: `Uninitialized(new)` and type-annotation
    /// offsets.
    fn instruction_refs(&self) -> HashSet<Label> {
        let mut set = HashSet::new();
        for a in &self.attributes {
            match &a.body {
                CodeAttrBody::StackMap(fs) => {
                    for f in fs {
                        for v in f.locals.iter().chain(&f.stack) {
                            if let VType::Uninitialized(l) = v {
                                set.insert(*l);
                            }
                        }
                    }
                }
                CodeAttrBody::TypeAnnotations(ts) => {
                    for t in ts {
                        if let TypeTarget::Offset(_, l) | TypeTarget::TypeArgument(_, l, _) =
                            t.target
                        {
                            set.insert(l);
                        }
                    }
                }
                _ => {}
            }
        }
        set
    }

    fn retarget_instruction_refs(&mut self, remap: &HashMap<Label, Label>) {
        for a in &mut self.attributes {
            match &mut a.body {
                CodeAttrBody::StackMap(fs) => {
                    for f in fs {
                        for v in f.locals.iter_mut().chain(f.stack.iter_mut()) {
                            if let VType::Uninitialized(l) = v
                                && let Some(n) = remap.get(l)
                            {
                                *l = *n;
                            }
                        }
                    }
                }
                CodeAttrBody::TypeAnnotations(ts) => {
                    for t in ts {
                        if let TypeTarget::Offset(_, l) | TypeTarget::TypeArgument(_, l, _) =
                            &mut t.target
                            && let Some(n) = remap.get(l)
                        {
                            *l = *n;
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
