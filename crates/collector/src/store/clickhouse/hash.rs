//! The hashes a shared store names things by, the same on every machine and release: a VM's
//! id (from host, pid and start) and a stack's id in the stacks table (from its frames).

use jvmprof_profile::{Frame, Profile};

/// The id of a VM in a shared store: the same on every collector (53 bits, exact in JSON).
pub fn vm_id(host: &str, pid: u32, start_unix_ms: u64) -> u64 {
    let mut h = Fnv::new();
    h.bytes(host.as_bytes());
    h.u64(pid as u64);
    h.u64(start_unix_ms);
    (h.finish() & ((1 << 53) - 1)).max(1)
}

/// A 64-bit hash that is the same on every machine and release (stack ids are shared by
/// collectors through the database): eight bytes a step, multiply and rotate, then a final mix.
struct Fnv(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(K).rotate_left(29);
    }
    fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        // The length ends the field, so ("ab", "c") and ("a", "bc") differ.
        self.word(u64::from_le_bytes(last) ^ ((b.len() as u64) << 56));
    }
    fn u64(&mut self, v: u64) {
        self.word(v);
    }
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

fn frame_hash(f: &Frame) -> u64 {
    let mut h = Fnv::new();
    h.u64(f.kind as u64);
    h.bytes(f.class.as_bytes());
    h.bytes(f.method.as_bytes());
    h.bytes(f.descriptor.as_bytes());
    h.u64(f.line as u64);
    h.finish()
}

/// A stack's id in the stacks table: its frames' hashes, root first, hashed in turn (so a
/// stack's hash continues its parent's). [`StackHashes`] computes the same per prefix.
#[cfg(test)]
fn stack_hash(frames: &[&Frame]) -> u64 {
    let mut h = Fnv::new();
    for f in frames {
        h.u64(frame_hash(f));
    }
    h.finish()
}

/// The hashes of a growing profile's stacks, computed once per frame and per stack prefix (the
/// profile only grows: frames and stacks keep their ids).
#[derive(Default)]
pub(super) struct StackHashes {
    frames: Vec<Option<u64>>,
    stacks: Vec<Option<u64>>,
    /// Scratch: the prefixes of the stack being hashed.
    chain: Vec<u32>,
}

impl StackHashes {
    /// The hash of `profile`'s stack `stack` (its prefix state is kept raw, so children
    /// continue it).
    pub(super) fn get(&mut self, profile: &Profile, stack: u32) -> u64 {
        self.frames.resize(profile.frames.len(), None);
        self.stacks.resize(profile.stacks.len(), None);
        Fnv(self.state(profile, stack)).finish()
    }

    fn state(&mut self, profile: &Profile, stack: u32) -> u64 {
        if let Some(h) = self.stacks[stack as usize] {
            return h;
        }
        // The stack's unhashed prefixes, deepest first.
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        chain.push(stack);
        let mut state = Fnv::new();
        let mut at = stack;
        while let Some(parent) = profile.stacks.parent(at) {
            if let Some(h) = self.stacks[parent as usize] {
                state = Fnv(h);
                break;
            }
            chain.push(parent);
            at = parent;
        }
        for &s in chain.iter().rev() {
            if let Some(top) = profile.stacks.top(s) {
                let fh = *self.frames[top as usize]
                    .get_or_insert_with(|| frame_hash(&profile.frames[top as usize]));
                state.u64(fh);
            }
            self.stacks[s as usize] = Some(state.0);
        }
        self.chain = chain;
        state.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jvmprof_profile::{Meta, ProfileBuilder};

    fn b_frame() -> Frame {
        Frame::java("B", "c", "()V", 2)
    }

    #[test]
    fn ids_and_hashes_are_stable() {
        assert_eq!(vm_id("h", 1, 2), vm_id("h", 1, 2));
        assert_ne!(vm_id("h", 1, 2), vm_id("h", 1, 3));
        assert!(vm_id("h", 1, 2) < 1 << 53);
        let a = Frame::java("A", "b", "()V", 1);
        let b = Frame::java("Ab", "", "()V", 1);
        assert_ne!(stack_hash(&[&a]), stack_hash(&[&b]));
        // Fixed: the hash is the stacks table's key across collectors and releases.
        assert_eq!(stack_hash(&[]), Fnv::new().finish());
        assert_eq!(frame_hash(&a), 0xae16_c422_35c4_6bef);
        // The per-prefix computation gives the same hashes as the whole stack's.
        let mut b = ProfileBuilder::new(Meta::default());
        let (fa, fb) = (b.frame(a.clone()), b.frame(b_frame()));
        let s1 = b.stack(&[fa, fb]);
        let s2 = b.stack(&[fa]);
        let s3 = b.stack(&[fb, fa, fb]);
        let p = b.finish();
        let mut h = StackHashes::default();
        for s in [s1, s2, s3] {
            let frames: Vec<&Frame> = p.stack_frames(s).collect();
            assert_eq!(h.get(&p, s), stack_hash(&frames), "{s}");
        }
    }
}
