//! The identity seed file: load it, or create it with a fresh random seed, readable by its
//! owner only. The only file-system access of the secured mesh; the key itself and everything
//! done with it live in `shoal_proto::crypto::identity`, which never touches a file.
//!
//! **Owns:** the identity seed file on disk. **Must not touch:** the key once loaded
//! (`shoal_proto::crypto::identity`).

use rand::{CryptoRng, RngCore};
use shoal_proto::crypto::{Identity, IdentityError};
use std::io::{self, Read, Write};
use std::path::Path;
use zeroize::Zeroizing;

/// Loads the seed file at `path`, or, when it does not exist, creates it with a fresh random
/// seed and mode 0600 (created exclusively, so a concurrent creator's file is read instead).
pub fn load_or_create(
    path: &Path,
    name: &str,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<Identity, IdentityError> {
    let io_err = |source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    };
    match read_seed_file(path) {
        Ok(text) => return Identity::from_seed_hex(&text, name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    rng.fill_bytes(&mut seed[..]);
    let mut text = Zeroizing::new(hex::encode(&seed[..]));
    text.push('\n');
    match create_private(path) {
        Ok(mut file) => {
            let written = file
                .write_all(text.as_bytes())
                .and_then(|()| file.sync_all());
            if let Err(e) = written {
                // A half-written seed would fail every later start; better leave no file.
                let _ = std::fs::remove_file(path);
                return Err(io_err(e));
            }
            tracing::info!(path = %path.display(), "created identity seed file");
            Identity::from_seed(&seed, name)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let text = read_seed_file(path).map_err(io_err)?;
            Identity::from_seed_hex(&text, name)
        }
        Err(e) => Err(io_err(e)),
    }
}

fn read_seed_file(path: &Path) -> io::Result<Zeroizing<String>> {
    let mut file = std::fs::File::open(path)?;
    warn_if_loose(path, &file);
    let mut text = Zeroizing::new(String::new());
    // 64 hex characters and a newline; anything much longer is not a seed file.
    Read::by_ref(&mut file)
        .take(256)
        .read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(unix)]
fn create_private(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn create_private(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(unix)]
fn warn_if_loose(path: &Path, file: &std::fs::File) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = file.metadata() {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format_args!("{mode:o}"),
                "identity seed file is readable by group or others");
        }
    }
}

#[cfg(not(unix))]
fn warn_if_loose(_path: &Path, _file: &std::fs::File) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let d =
            std::env::temp_dir().join(format!("shoal-crypto-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn seed_file_created_private_and_reloaded() {
        let dir = temp_dir("seed");
        let path = dir.join("identity.key");
        let a = load_or_create(&path, "node", &mut rand::rngs::OsRng).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim().len(), 64);
        assert!(text.trim().bytes().all(|b| b.is_ascii_hexdigit()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let b = load_or_create(&path, "node", &mut rand::rngs::OsRng).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        assert_eq!(
            Identity::from_seed_hex(&text, "node").unwrap().node_id(),
            a.node_id()
        );

        std::fs::write(dir.join("bad.key"), "abc\n").unwrap();
        assert!(matches!(
            load_or_create(&dir.join("bad.key"), "n", &mut rand::rngs::OsRng),
            Err(IdentityError::BadSeed)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
