//! Whether an executable runs in an image that holds nothing else: an ELF file without a
//! program interpreter (`PT_INTERP`) is statically linked and needs no loader or
//! libraries.

/// The program header type of the interpreter's path.
const PT_INTERP: u32 = 3;

/// Whether `head` (the first bytes of a file, its program headers included: a few
/// kilobytes are enough for any linker's output) is a statically linked ELF executable.
/// Anything else, headers cut short included, is not.
pub fn is_static_executable(head: &[u8]) -> bool {
    if head.len() < 0x34 || &head[..4] != b"\x7fELF" {
        return false;
    }
    let little = match head[5] {
        1 => true,
        2 => false,
        _ => return false,
    };
    let number = |at: usize, len: usize| -> Option<u64> {
        let bytes = head.get(at..at.checked_add(len)?)?;
        let fold = |n: u64, b: &u8| (n << 8) | u64::from(*b);
        Some(if little {
            bytes.iter().rev().fold(0, fold)
        } else {
            bytes.iter().fold(0, fold)
        })
    };
    // (e_phoff, e_phentsize, e_phnum) of ELF32 and ELF64.
    let (offset, size, count) = match head[4] {
        1 => (number(0x1c, 4), number(0x2a, 2), number(0x2c, 2)),
        2 => (number(0x20, 8), number(0x36, 2), number(0x38, 2)),
        _ => return false,
    };
    let (Some(offset), Some(size), Some(count)) = (offset, size, count) else {
        return false;
    };
    let Ok(offset) = usize::try_from(offset) else {
        return false;
    };
    let size = size as usize;
    for i in 0..count as usize {
        match i
            .checked_mul(size)
            .and_then(|at| at.checked_add(offset))
            .and_then(|at| number(at, 4))
        {
            Some(kind) if kind == u64::from(PT_INTERP) => return false,
            Some(_) => {}
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_head(path: &str) -> Option<Vec<u8>> {
        use std::io::Read as _;
        let mut head = vec![0; 64 * 1024];
        let mut file = std::fs::File::open(path).ok()?;
        let n = file.read(&mut head).ok()?;
        head.truncate(n);
        Some(head)
    }

    #[test]
    fn a_dynamically_linked_program_is_not_static_and_neither_is_a_script() {
        // The shell of every Debian is dynamically linked.
        if let Some(head) = read_head("/bin/sh") {
            assert!(!is_static_executable(&head));
        }
        assert!(!is_static_executable(b"#!/bin/sh\necho hello\n"));
        assert!(!is_static_executable(b"\x7fELF"));
    }

    #[test]
    fn an_elf64_without_an_interpreter_is_static() {
        // An ELF64 little-endian header with two program headers: PT_LOAD and PT_NOTE.
        let mut elf = vec![0u8; 0x40 + 2 * 56];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[0x20] = 0x40;
        elf[0x36] = 56;
        elf[0x38] = 2;
        elf[0x40] = 1;
        elf[0x40 + 56] = 4;
        assert!(is_static_executable(&elf));
        // The same with a PT_INTERP second.
        elf[0x40 + 56] = 3;
        assert!(!is_static_executable(&elf));
        // Program headers beyond what was read: cannot tell, so not static.
        assert!(!is_static_executable(&elf[..0x50]));
    }
}
