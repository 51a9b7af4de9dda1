//! Layout: instruction offsets to a fixed point (switch padding, jump widening), far
//! conditional jumps through trampolines, and the code bytes.

use super::{Code, Frame, Insn, Label, pad};
use crate::bytes::{put_u2, put_u4};
use crate::error::{RawError, RawResult};
use crate::opcodes::*;

/// The result of one layout attempt.
pub(super) enum Laid {
    /// Code bytes and each label's offset.
    Done(Vec<u8>, Vec<Option<u32>>),
    /// Conditional jump at this index is out of reach and needs a trampoline (offsets given).
    NeedTrampoline(usize, Vec<u32>),
}

impl Code {
    /// Computes offsets to a fixed point: switch padding depends on position, and a jump whose
    /// target is beyond ±32 KiB is widened (`goto`→`goto_w`, `jsr`→`jsr_w`, a conditional to
    /// its inverse over a `goto_w`). Returns the code bytes and each label's offset.
    pub(super) fn layout(&self) -> RawResult<Laid> {
        let has_frames = self.major >= 50;
        let mut wide = vec![false; self.insns.len()];
        let mut label_off: Vec<Option<u32>> = vec![None; self.next_label as usize];
        let mut insn_off = vec![0u32; self.insns.len()];
        loop {
            let mut o: u32 = 0;
            for (i, insn) in self.insns.iter().enumerate() {
                insn_off[i] = o;
                if let Insn::Label(l) = insn {
                    match label_off.get_mut(l.0 as usize) {
                        Some(slot) => *slot = Some(o),
                        None => {
                            return Err(RawError::new(
                                0,
                                format!("label {} was not made by this code", l.0),
                            ));
                        }
                    }
                }
                o = o.saturating_add(insn_size(insn, o, wide[i]));
            }
            if o > 65535 {
                return Err(RawError::new(
                    o as usize,
                    format!("code is {o} bytes, over the 65535-byte limit"),
                ));
            }
            let mut changed = false;
            for (i, insn) in self.insns.iter().enumerate() {
                if let Insn::Jump { target, .. } = insn {
                    if wide[i] {
                        continue;
                    }
                    let t = label_off
                        .get(target.0 as usize)
                        .copied()
                        .flatten()
                        .ok_or_else(|| {
                            RawError::new(0, format!("jump to unplaced label {}", target.0))
                        })?;
                    let d = i64::from(t) - i64::from(insn_off[i]);
                    if i16::try_from(d).is_err() {
                        if has_frames && is_conditional(insn.opcode().unwrap_or(0)) {
                            return Ok(Laid::NeedTrampoline(i, insn_off));
                        }
                        wide[i] = true;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut out = Vec::with_capacity(insn_off.last().copied().unwrap_or(0) as usize + 16);
        let target = |l: &Label| label_off.get(l.0 as usize).copied().flatten().unwrap_or(0);
        for (i, insn) in self.insns.iter().enumerate() {
            let at = insn_off[i];
            debug_assert_eq!(out.len(), at as usize);
            let d = |l: &Label| (i64::from(target(l)) - i64::from(at)) as i32;
            match insn {
                Insn::Label(_) => {}
                Insn::Simple(op) => out.push(*op),
                Insn::Bipush(v) => out.extend_from_slice(&[0x10, *v as u8]),
                Insn::Sipush(v) => {
                    out.push(0x11);
                    put_u2(&mut out, *v as u16);
                }
                Insn::Ldc { op, index } => {
                    if *op == LDC && *index <= 255 {
                        out.extend_from_slice(&[LDC, *index as u8]);
                    } else {
                        out.push(if *op == LDC2_W { LDC2_W } else { LDC_W });
                        put_u2(&mut out, *index);
                    }
                }
                Insn::Local { op, index } => {
                    if *index <= 255 {
                        out.extend_from_slice(&[*op, *index as u8]);
                    } else {
                        out.extend_from_slice(&[WIDE, *op]);
                        put_u2(&mut out, *index);
                    }
                }
                Insn::Iinc { index, delta } => {
                    if *index <= 255 && i8::try_from(*delta).is_ok() {
                        out.extend_from_slice(&[IINC, *index as u8, *delta as u8]);
                    } else {
                        out.extend_from_slice(&[WIDE, IINC]);
                        put_u2(&mut out, *index);
                        put_u2(&mut out, *delta as u16);
                    }
                }
                Insn::Ref { op, index } => {
                    out.push(*op);
                    put_u2(&mut out, *index);
                }
                Insn::InvokeInterface { index, count } => {
                    out.push(0xb9);
                    put_u2(&mut out, *index);
                    out.extend_from_slice(&[*count, 0]);
                }
                Insn::InvokeDynamic { index } => {
                    out.push(0xba);
                    put_u2(&mut out, *index);
                    out.extend_from_slice(&[0, 0]);
                }
                Insn::NewArray(t) => out.extend_from_slice(&[0xbc, *t]),
                Insn::MultiANewArray { index, dims } => {
                    out.push(0xc5);
                    put_u2(&mut out, *index);
                    out.push(*dims);
                }
                Insn::Jump { op, target: t } => {
                    if !wide[i] {
                        out.push(*op);
                        put_u2(&mut out, d(t) as u16);
                    } else if *op == GOTO || *op == JSR {
                        out.push(if *op == GOTO { GOTO_W } else { JSR_W });
                        put_u4(&mut out, d(t) as u32);
                    } else {
                        // Only without stack maps (a trampoline is used with them).
                        out.push(invert(*op));
                        put_u2(&mut out, 8);
                        out.push(GOTO_W);
                        put_u4(&mut out, (d(t) - 3) as u32);
                    }
                }
                Insn::TableSwitch {
                    default,
                    low,
                    targets,
                } => {
                    out.push(TABLESWITCH);
                    out.resize(out.len() + pad(at), 0);
                    put_u4(&mut out, d(default) as u32);
                    put_u4(&mut out, *low as u32);
                    put_u4(&mut out, low.wrapping_add(targets.len() as i32 - 1) as u32);
                    for t in targets {
                        put_u4(&mut out, d(t) as u32);
                    }
                }
                Insn::LookupSwitch { default, pairs } => {
                    out.push(LOOKUPSWITCH);
                    out.resize(out.len() + pad(at), 0);
                    put_u4(&mut out, d(default) as u32);
                    put_u4(&mut out, pairs.len() as u32);
                    for (k, t) in pairs {
                        put_u4(&mut out, *k as u32);
                        put_u4(&mut out, d(t) as u32);
                    }
                }
            }
        }
        Ok(Laid::Done(out, label_off))
    }

    /// Widens a far conditional in code with stack maps without a new merge point that would
    /// need type inference: the conditional jumps to a trampoline `goto(_w) target` placed
    /// after a nearby unconditional transfer (so nothing falls into it), whose frame is a copy
    /// of the target's. Positions inside exception ranges are avoided (the copied frame need
    /// not fit the handler).
    pub(super) fn add_trampoline(&mut self, jump: usize, insn_off: &[u32]) -> RawResult<()> {
        let Some(Insn::Jump { target, .. }) = self.insns.get(jump).cloned() else {
            return Err(RawError::new(0, "trampoline for a non-jump"));
        };
        let pos_of = |l: Label| self.insns.iter().position(|x| *x == Insn::Label(l));
        // The target's frame: any frame at a label in the run of labels around the target.
        let tpos = pos_of(target).ok_or_else(|| RawError::new(0, "jump to unplaced label"))?;
        let (mut a, mut b) = (tpos, tpos);
        while a > 0 && matches!(self.insns[a - 1], Insn::Label(_)) {
            a -= 1;
        }
        while b + 1 < self.insns.len() && matches!(self.insns[b + 1], Insn::Label(_)) {
            b += 1;
        }
        let run: Vec<Label> = self.insns[a..=b]
            .iter()
            .filter_map(|x| {
                if let Insn::Label(l) = x {
                    Some(*l)
                } else {
                    None
                }
            })
            .collect();
        let frame = self
            .frames()
            .and_then(|fs| fs.iter().find(|f| run.contains(&f.label)))
            .cloned()
            .ok_or_else(|| {
                RawError::new(
                    insn_off[jump] as usize,
                    "far branch target has no stack-map frame",
                )
            })?;
        let ranges: Vec<(usize, usize)> = self
            .handlers
            .iter()
            .filter_map(|h| Some((pos_of(h.start)?, pos_of(h.end)?)))
            .collect();
        let here = i64::from(insn_off[jump]);
        let unconditional = |insn: &Insn| match insn {
            Insn::Jump { op, .. } => *op == GOTO,
            Insn::Simple(op) => is_return(*op) || *op == ATHROW,
            Insn::Local { op, .. } => *op == RET,
            Insn::TableSwitch { .. } | Insn::LookupSwitch { .. } => true,
            _ => false,
        };
        let frame_labels: Vec<Label> = self
            .frames()
            .map(|fs| fs.iter().map(|f| f.label).collect())
            .unwrap_or_default();
        // Candidates: (distance, insertion index, Some(label) = first jump over the trampoline
        // to this framed label). After an unconditional transfer nothing falls into the
        // trampoline; before a framed label a `goto label` keeps fall-through off it.
        let mut best: Option<(i64, usize, Option<Label>)> = None;
        let mut prev_unconditional = false;
        for (j, insn) in self.insns.iter().enumerate() {
            let (q, over) = match insn {
                Insn::Label(_) => {
                    let starts_run = j == 0 || !matches!(self.insns[j - 1], Insn::Label(_));
                    if !starts_run || prev_unconditional {
                        continue;
                    }
                    // The frame label of this run, if any.
                    let mut k = j;
                    let mut framed = None;
                    while let Some(Insn::Label(l2)) = self.insns.get(k) {
                        if frame_labels.contains(l2) {
                            framed = Some(*l2);
                        }
                        k += 1;
                    }
                    match framed {
                        Some(fl) => (j, Some(fl)),
                        None => continue,
                    }
                }
                _ => {
                    prev_unconditional = unconditional(insn);
                    if !prev_unconditional {
                        continue;
                    }
                    (j + 1, None)
                }
            };
            if ranges.iter().any(|&(s, e)| s < q && q <= e) {
                continue;
            }
            let at = i64::from(insn_off.get(q).copied().unwrap_or_else(|| insn_off[j] + 5));
            let dist = (at - here).abs();
            // Margin for the trampolines and widenings still to come.
            if dist < 30_000 && best.is_none_or(|(d, _, _)| dist < d) {
                best = Some((dist, q, over));
            }
        }
        // Last resort, the method's start: `goto L0; trampoline; L0:` with L0's frame being the
        // implicit initial frame.
        let start_dist = here;
        let mut at_start = false;
        if start_dist < 30_000 && best.is_none_or(|(d, _, _)| start_dist < d) {
            let l0 = self.new_label();
            best = Some((start_dist, 0, Some(l0)));
            at_start = true;
        }
        let (_, q, over) = best.ok_or_else(|| {
            RawError::new(
                insn_off[jump] as usize,
                "conditional jump beyond 32 KiB with no place for a trampoline within reach",
            )
        })?;
        let tl = self.new_label();
        let mut tramp = Vec::with_capacity(3);
        if let Some(fl) = over {
            tramp.push(Insn::Jump {
                op: GOTO,
                target: fl,
            });
        }
        tramp.push(Insn::Label(tl));
        tramp.push(Insn::Jump { op: GOTO, target });
        if let (true, Some(l0)) = (at_start, over) {
            tramp.push(Insn::Label(l0));
            let initial = Frame {
                label: l0,
                locals: self.initial_locals.clone(),
                stack: vec![],
            };
            if let Some(fs) = self.frames_mut() {
                fs.push(initial);
            }
        }
        let added = tramp.len();
        self.insns.splice(q..q, tramp);
        let j = if q <= jump { jump + added } else { jump };
        if let Some(Insn::Jump { target, .. }) = self.insns.get_mut(j) {
            *target = tl;
        }
        if let Some(fs) = self.frames_mut() {
            fs.push(Frame {
                label: tl,
                locals: frame.locals,
                stack: frame.stack,
            });
        }
        Ok(())
    }
}

fn insn_size(insn: &Insn, at: u32, wide: bool) -> u32 {
    match insn {
        Insn::Label(_) => 0,
        Insn::Simple(_) => 1,
        Insn::Bipush(_) | Insn::NewArray(_) => 2,
        Insn::Sipush(_) | Insn::Ref { .. } => 3,
        Insn::Ldc { op, index } => {
            if *op == LDC && *index <= 255 {
                2
            } else {
                3
            }
        }
        Insn::Local { index, .. } => {
            if *index <= 255 {
                2
            } else {
                4
            }
        }
        Insn::Iinc { index, delta } => {
            if *index <= 255 && i8::try_from(*delta).is_ok() {
                3
            } else {
                6
            }
        }
        Insn::InvokeInterface { .. } | Insn::InvokeDynamic { .. } => 5,
        Insn::MultiANewArray { .. } => 4,
        Insn::Jump { op, .. } => match (wide, *op) {
            (false, _) => 3,
            (true, GOTO | JSR) => 5,
            (true, _) => 8,
        },
        Insn::TableSwitch { targets, .. } => 1 + pad(at) as u32 + 12 + 4 * targets.len() as u32,
        Insn::LookupSwitch { pairs, .. } => 1 + pad(at) as u32 + 8 + 8 * pairs.len() as u32,
    }
}
