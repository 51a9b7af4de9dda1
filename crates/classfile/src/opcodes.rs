//! Opcode facts used by the reader, layout and basic-block analysis.

pub const NEW: u8 = 0xbb;
pub const GOTO: u8 = 0xa7;
pub const JSR: u8 = 0xa8;
pub const RET: u8 = 0xa9;
pub const GOTO_W: u8 = 0xc8;
pub const JSR_W: u8 = 0xc9;
pub const IFNULL: u8 = 0xc6;
pub const IFNONNULL: u8 = 0xc7;
pub const ATHROW: u8 = 0xbf;
pub const MONITORENTER: u8 = 0xc2;
pub const MONITOREXIT: u8 = 0xc3;
pub const INVOKESPECIAL: u8 = 0xb7;
pub const INVOKESTATIC: u8 = 0xb8;
pub const LDC: u8 = 0x12;
pub const LDC_W: u8 = 0x13;
pub const LDC2_W: u8 = 0x14;
pub const WIDE: u8 = 0xc4;
pub const IINC: u8 = 0x84;
pub const TABLESWITCH: u8 = 0xaa;
pub const LOOKUPSWITCH: u8 = 0xab;

/// `ireturn` .. `return`.
pub fn is_return(op: u8) -> bool {
    (0xac..=0xb1).contains(&op)
}

/// A conditional branch (`ifeq` .. `if_acmpne`, `ifnull`, `ifnonnull`).
pub fn is_conditional(op: u8) -> bool {
    (0x99..=0xa6).contains(&op) || op == IFNULL || op == IFNONNULL
}

/// The conditional that branches exactly when `op` does not.
pub fn invert(op: u8) -> u8 {
    match op {
        IFNULL => IFNONNULL,
        IFNONNULL => IFNULL,
        _ => ((op - 0x99) ^ 1) + 0x99,
    }
}

/// Instructions that may throw an exception (JP's "precise" mode ends a block after each).
/// Covers the JVMS run-time exceptions and linkage/initialization of symbolic references.
pub fn may_throw(op: u8) -> bool {
    matches!(op,
        0x12..=0x14            // ldc: class/method-type/dynamic constants may fail to resolve
        | 0x2e..=0x35          // array loads
        | 0x4f..=0x56          // array stores
        | 0x6c | 0x6d | 0x70 | 0x71 // idiv ldiv irem lrem
        | 0xac..=0xb1          // returns (IllegalMonitorStateException)
        | 0xb2..=0xba          // field access and invokes
        | 0xbb..=0xbd          // new newarray anewarray
        | 0xbe | 0xbf          // arraylength athrow
        | 0xc0 | 0xc1          // checkcast instanceof
        | 0xc2 | 0xc3          // monitorenter monitorexit
        | 0xc5) // multianewarray
}
