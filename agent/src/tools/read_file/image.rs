//! Recognising images for `read_file`: by extension and by magic bytes, and reading their
//! dimensions from the header where that is easy (PNG, GIF, JPEG, BMP).

use std::path::Path;

/// The MIME type an image file's extension claims, if it is one `read_file` returns as an
/// image (SVG is text).
pub(super) fn mime_from_extension(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" | "jpe" | "jfif" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" | "dib" => "image/bmp",
        "tif" | "tiff" => "image/tiff",
        "ico" => "image/x-icon",
        _ => return None,
    })
}

/// The MIME type the first bytes of a file announce, if they are an image's.
pub(super) fn mime_from_magic(head: &[u8]) -> Option<&'static str> {
    let starts = |magic: &[u8]| head.starts_with(magic);
    if starts(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if starts(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        Some("image/gif")
    } else if starts(b"RIFF") && head.get(8..12) == Some(b"WEBP") {
        Some("image/webp")
    } else if starts(b"BM") && head.len() >= 26 && head.get(14) == Some(&40) {
        // "BM" alone is too common in text; require a BITMAPINFOHEADER size of 40.
        Some("image/bmp")
    } else if starts(b"II*\0") || starts(b"MM\0*") {
        Some("image/tiff")
    } else if starts(&[0, 0, 1, 0]) && head.len() >= 6 {
        Some("image/x-icon")
    } else {
        None
    }
}

/// Width and height in pixels, when the header says so plainly.
pub(super) fn dimensions(mime: &str, bytes: &[u8]) -> Option<(u32, u32)> {
    let be32 = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let le16 = |at: usize| {
        Some(u32::from(u16::from_le_bytes(
            bytes.get(at..at + 2)?.try_into().ok()?,
        )))
    };
    let le32 = |at: usize| Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    match mime {
        "image/png" if bytes.get(12..16) == Some(b"IHDR") => Some((be32(16)?, be32(20)?)),
        "image/gif" => Some((le16(6)?, le16(8)?)),
        "image/bmp" => Some((le32(18)?.unsigned_abs(), le32(22)?.unsigned_abs())),
        "image/jpeg" => jpeg_dimensions(bytes),
        _ => None,
    }
}

/// Walks the JPEG segments to the first start-of-frame marker.
fn jpeg_dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    let be16 = |at: usize| {
        Some(u32::from(u16::from_be_bytes(
            bytes.get(at..at + 2)?.try_into().ok()?,
        )))
    };
    let mut i = 2;
    while i + 4 <= bytes.len() {
        if bytes[i] != 0xFF {
            return None;
        }
        let marker = bytes[i + 1];
        if marker == 0xFF {
            i += 1;
            continue;
        }
        let is_sof = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            return Some((be16(i + 7)?, be16(i + 5)?));
        }
        i += 2 + usize::try_from(be16(i + 2)?).ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A 1×1 PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52, 0,
        0, 0, 3, 0, 0, 0, 2, 8, 6, 0, 0, 0, 0x1F, 0x15, 0xC4, 0x89,
    ];

    #[test]
    fn magic_and_extension_are_recognised() {
        assert_eq!(mime_from_magic(PNG), Some("image/png"));
        assert_eq!(
            mime_from_magic(b"GIF89a\x05\x00\x07\x00"),
            Some("image/gif")
        );
        assert_eq!(mime_from_magic(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(mime_from_magic(b"BM is a band"), None);
        assert_eq!(mime_from_magic(b"<svg xmlns=..."), None);
        assert_eq!(
            mime_from_extension(Path::new("a/B.JPG")),
            Some("image/jpeg")
        );
        assert_eq!(mime_from_extension(Path::new("logo.svg")), None);
        assert_eq!(mime_from_extension(Path::new("Makefile")), None);
    }

    #[test]
    fn dimensions_come_from_the_header() {
        assert_eq!(dimensions("image/png", PNG), Some((3, 2)));
        assert_eq!(
            dimensions("image/gif", b"GIF89a\x05\x00\x07\x00"),
            Some((5, 7))
        );
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 17, 8, 0x01, 0xE0, 0x02, 0x80, 3,
        ];
        assert_eq!(dimensions("image/jpeg", &jpeg), Some((640, 480)));
        assert_eq!(dimensions("image/png", &PNG[..20]), None);
        assert_eq!(dimensions("image/webp", b"RIFF"), None);
    }
}
