//! Store names in output meant for people.
//!
//! A store name may hold any character but `/` and NUL, newlines and terminal escape
//! sequences included, so a name printed raw can forge lines of a listing (`ckptfs ls`,
//! `status`, `fsck`, restore reports) or drive the terminal. [`esc`] prints such
//! characters as C-style escapes, as `ls -b` does: `\n`, `\t`, `\r`, `\\` for a
//! backslash, `\xHH` for other control characters, `\u{HHHH}` for Unicode format
//! characters that reorder text (bidirectional overrides, zero-width characters). JSON
//! output is not escaped this way: JSON strings already carry every name exactly.

use std::borrow::Cow;
use std::fmt::Write;

fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control() || is_format(c)
}

/// Unicode format characters that change how the rest of a line is displayed.
fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00ad}'
        | '\u{061c}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}')
}

/// `s` with newlines, control and text-reordering characters escaped (`ls -b` style).
pub fn esc(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x100 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn names_that_could_forge_lines_or_drive_the_terminal_are_escaped() {
        assert_eq!(esc("rank0.bin"), "rank0.bin");
        assert_eq!(esc("a b"), "a b");
        assert_eq!(esc("é€"), "é€");
        assert_eq!(esc("x\nfake.bin"), "x\\nfake.bin");
        assert_eq!(esc("a\\nb"), "a\\\\nb", "a real backslash stays distinguishable");
        assert_eq!(esc("\t\r\x1b[2J\x7f"), "\\t\\r\\x1b[2J\\x7f");
        assert_eq!(esc("\u{85}"), "\\x85");
        assert_eq!(esc("evil\u{202e}nib.exe"), "evil\\u{202e}nib.exe");
        assert_eq!(esc("\u{200b}"), "\\u{200b}");
    }
}
