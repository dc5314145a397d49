//! Files that hold what people typed or what the process logged: readable by their owner
//! only, in a directory only the owner may enter (secrets pasted by mistake end up in them).

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Opens `path` for appending, creating it (and its missing directories, mode 0700) with mode
/// 0600; a file that exists already is narrowed to 0600 too.
pub fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_or_old_file_is_its_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/log");
        open_append(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(path.parent().unwrap())), (0o600, 0o700));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_append(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
    }
}
