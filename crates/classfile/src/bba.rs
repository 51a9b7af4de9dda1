//! Basic-block analysis as in JP (Binder & Hulaas). *Default* blocks end only at instructions
//! that transfer control (branches, switches, returns, `athrow`, `jsr`, `ret`) and start at
//! every branch target and exception handler; *precise* blocks also end after every
//! instruction that may throw ([`crate::opcodes::may_throw`]).

use std::collections::HashSet;

use crate::code::{Code, Insn};
use crate::opcodes::{ATHROW, RET, is_return, may_throw};

/// Which block boundaries to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Default,
    Precise,
}

/// A basic block: `start` is the index in [`Code::insns`] of its first instruction, `len` the
/// number of bytecode instructions in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub start: usize,
    pub len: usize,
}

fn ends_block(insn: &Insn, mode: Mode) -> bool {
    let transfers = match insn {
        Insn::Jump { .. } | Insn::TableSwitch { .. } | Insn::LookupSwitch { .. } => true,
        Insn::Local { op, .. } => *op == RET,
        Insn::Simple(op) => is_return(*op) || *op == ATHROW,
        _ => false,
    };
    transfers || (mode == Mode::Precise && insn.opcode().is_some_and(may_throw))
}

/// The basic blocks of `code`, in code order.
pub fn basic_blocks(code: &Code, mode: Mode) -> Vec<Block> {
    let mut leaders: HashSet<_> = code.insns.iter().flat_map(Insn::targets).collect();
    leaders.extend(code.handlers.iter().map(|h| h.handler));
    let mut blocks = Vec::new();
    let mut cur: Option<Block> = None;
    let mut new_block = true;
    for (i, insn) in code.insns.iter().enumerate() {
        if let Insn::Label(l) = insn {
            new_block |= leaders.contains(l);
            continue;
        }
        if new_block {
            blocks.extend(cur.take());
            cur = Some(Block { start: i, len: 0 });
            new_block = false;
        }
        if let Some(b) = cur.as_mut() {
            b.len += 1;
        }
        if ends_block(insn, mode) {
            new_block = true;
        }
    }
    blocks.extend(cur);
    blocks
}
