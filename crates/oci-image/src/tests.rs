//! Tests of the whole path, source to root filesystem: images are built here — layers with
//! the `tar` crate, layouts with the crate's own writer, `docker save` archives by hand in
//! both layouts — and unpacked into temporary caches.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use oci_spec::image::{Arch, Descriptor, ImageIndex, MediaType, Os, PlatformBuilder};
use tar::{EntryType, Header};

use crate::write::{LayoutWriter, image_configuration};
use crate::{ImageConfig, ImageError, ImageStore, Source, digest, platform, write_layout};

const MTIME: u64 = 1_600_000_000;

/// Builds a layer tar.
struct Layer(tar::Builder<Vec<u8>>);

fn header(kind: EntryType, mode: u32, size: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(MTIME);
    header.set_uid(0);
    header.set_gid(0);
    header
}

impl Layer {
    fn new() -> Self {
        Self(tar::Builder::new(Vec::new()))
    }

    fn dir(self, path: &str) -> Self {
        self.dir_mode(path, 0o755)
    }

    fn dir_mode(mut self, path: &str, mode: u32) -> Self {
        let mut h = header(EntryType::Directory, mode, 0);
        self.0.append_data(&mut h, path, io::empty()).unwrap();
        self
    }

    fn file(self, path: &str, content: &str) -> Self {
        self.file_mode(path, content, 0o644)
    }

    fn file_mode(mut self, path: &str, content: &str, mode: u32) -> Self {
        let mut h = header(EntryType::Regular, mode, content.len() as u64);
        self.0
            .append_data(&mut h, path, content.as_bytes())
            .unwrap();
        self
    }

    fn file_owned(mut self, path: &str, content: &str, uid: u64, gid: u64) -> Self {
        let mut h = header(EntryType::Regular, 0o644, content.len() as u64);
        h.set_uid(uid);
        h.set_gid(gid);
        self.0
            .append_data(&mut h, path, content.as_bytes())
            .unwrap();
        self
    }

    fn symlink(mut self, path: &str, target: &str) -> Self {
        let mut h = header(EntryType::Symlink, 0o777, 0);
        self.0.append_link(&mut h, path, target).unwrap();
        self
    }

    fn hardlink(mut self, path: &str, target: &str) -> Self {
        let mut h = header(EntryType::Link, 0o644, 0);
        self.0.append_link(&mut h, path, target).unwrap();
        self
    }

    fn special(mut self, path: &str, kind: EntryType) -> Self {
        let mut h = header(kind, 0o644, 0);
        self.0.append_data(&mut h, path, io::empty()).unwrap();
        self
    }

    /// An entry whose name (and link name) are written as given, unchecked: `..` and
    /// absolute paths included.
    fn raw(mut self, kind: EntryType, name: &str, link: &str, content: &str) -> Self {
        let mut h = header(kind, 0o644, content.len() as u64);
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_cksum();
        self.0.append(&h, content.as_bytes()).unwrap();
        self
    }

    fn tar(self) -> Vec<u8> {
        self.0.into_inner().unwrap()
    }

    fn gzip(self) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&self.tar()).unwrap();
        gz.finish().unwrap()
    }
}

/// Writes an image of `layers` (bytes and the media type the manifest gives them) into the
/// layout `dir`, tagged `reference`; returns its manifest descriptor.
fn layout_image(
    dir: &Path,
    reference: &str,
    layers: Vec<(Vec<u8>, MediaType)>,
    config: &ImageConfig,
) -> Descriptor {
    let writer = LayoutWriter::create(dir).unwrap();
    // Diff ids make the config digest, the cache key, differ between images.
    let diff_ids = layers
        .iter()
        .map(|(bytes, _)| {
            let mut tar = Vec::new();
            match flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut tar) {
                Ok(_) => digest::of(&tar),
                Err(_) => digest::of(bytes),
            }
        })
        .collect();
    let descriptors = layers
        .into_iter()
        .map(|(bytes, media_type)| writer.add_blob(&bytes, media_type).unwrap())
        .collect();
    let manifest = writer
        .add_image(&image_configuration(config, diff_ids), descriptors)
        .unwrap();
    writer.tag(manifest.clone(), reference).unwrap();
    manifest
}

fn gz(layer: Layer) -> (Vec<u8>, MediaType) {
    (layer.gzip(), MediaType::ImageLayerGzip)
}

fn plain(layer: Layer) -> (Vec<u8>, MediaType) {
    (layer.tar(), MediaType::ImageLayer)
}

fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path).unwrap()
}

/// Tars `files` (name → content) and `links` (name → symlink target) into `path`.
fn write_archive(path: &Path, files: &[(String, Vec<u8>)], links: &[(String, String)]) {
    let mut builder = tar::Builder::new(fs::File::create(path).unwrap());
    for (name, content) in files {
        let mut h = header(EntryType::Regular, 0o644, content.len() as u64);
        builder.append_data(&mut h, name, &content[..]).unwrap();
    }
    for (name, target) in links {
        let mut h = header(EntryType::Symlink, 0o777, 0);
        builder.append_link(&mut h, name, target).unwrap();
    }
    builder.into_inner().unwrap();
}

/// The files of the directory `dir` and its subdirectories, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn is_root() -> bool {
    let dir = tempfile::tempdir().unwrap();
    fs::metadata(dir.path()).unwrap().uid() == 0
}

fn hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap()
}

// ---------------------------------------------------------------------------------------
// Layouts, references and configs

#[test]
fn a_layout_written_by_write_layout_unpacks_with_its_config() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("bin")).unwrap();
    fs::create_dir_all(src.join("etc/app")).unwrap();
    fs::write(src.join("bin/hello"), "#!/bin/sh\necho hello\n").unwrap();
    fs::set_permissions(src.join("bin/hello"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(src.join("etc/app/conf"), "secret").unwrap();
    fs::set_permissions(src.join("etc/app/conf"), fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("bin/hello", src.join("hello")).unwrap();
    let mtime = filetime::FileTime::from_unix_time(MTIME as i64, 0);
    filetime::set_file_mtime(src.join("bin/hello"), mtime).unwrap();

    let config = ImageConfig {
        entrypoint: vec!["/bin/hello".into()],
        cmd: vec!["--loud".into(), "world".into()],
        env: vec!["PATH=/bin".into(), "GREETING=hi there".into()],
        working_dir: Some("/etc/app".into()),
        user: Some("1000:1000".into()),
    };
    let layout = t.path().join("layout");
    let manifest = write_layout(&layout, "example.org/op:dev", &src, &config).unwrap();
    assert!(digest::sha256_hex(&manifest).is_some(), "{manifest}");
    assert!(layout.join("blobs/sha256").join(hex(&manifest)).is_file());

    let store = ImageStore::new(t.path().join("cache"));
    let image = store
        .unpack(&Source::Layout(layout.clone()), Some("example.org/op:dev"))
        .unwrap();
    assert_eq!(image.config, config);
    assert_eq!(
        image.rootfs,
        t.path().join("cache/rootfs").join(hex(&image.digest))
    );
    let root = &image.rootfs;
    assert_eq!(read(root.join("bin/hello")), "#!/bin/sh\necho hello\n");
    assert_eq!(read(root.join("etc/app/conf")), "secret");
    let hello = fs::metadata(root.join("bin/hello")).unwrap();
    assert_eq!(hello.permissions().mode() & 0o7777, 0o755);
    assert_eq!(hello.mtime(), MTIME as i64);
    let conf = fs::metadata(root.join("etc/app/conf")).unwrap();
    assert_eq!(conf.permissions().mode() & 0o7777, 0o640);
    assert_eq!(
        fs::read_link(root.join("hello")).unwrap(),
        Path::new("bin/hello")
    );
    assert_eq!(
        fs::metadata(root).unwrap().permissions().mode() & 0o777,
        0o755
    );

    // The only image is found without a reference too, by the same config digest.
    let again = store.unpack(&Source::Layout(layout), None).unwrap();
    assert_eq!(again, image);
}

#[test]
fn writing_a_second_image_into_a_layout_keeps_the_first() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    fs::write(a.join("which"), "a").unwrap();
    fs::write(b.join("which"), "b").unwrap();
    let layout = t.path().join("layout");
    let config = ImageConfig::default();
    write_layout(&layout, "docker.io/library/busybox:latest", &a, &config).unwrap();
    write_layout(&layout, "example.org/op:dev", &b, &config).unwrap();
    // Re-tagging replaces the entry of that name.
    write_layout(&layout, "example.org/op:dev", &b, &config).unwrap();

    let store = ImageStore::new(t.path().join("cache"));
    let source = Source::Layout(layout);
    for (reference, which) in [
        ("busybox", "a"),
        ("busybox:latest", "a"),
        ("docker.io/library/busybox", "a"),
        ("example.org/op:dev", "b"),
    ] {
        let image = store.unpack(&source, Some(reference)).unwrap();
        assert_eq!(read(image.rootfs.join("which")), which, "{reference}");
    }

    let err = store.unpack(&source, None).unwrap_err();
    assert!(matches!(err, ImageError::Ambiguous { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("docker.io/library/busybox:latest")
            && message.contains("example.org/op:dev"),
        "{message}"
    );
}

#[test]
fn an_unknown_reference_is_an_error_listing_the_images_there() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    layout_image(
        &layout,
        "example.org/op:dev",
        vec![gz(Layer::new().file("a", "a"))],
        &ImageConfig::default(),
    );
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout.clone()), Some("example.org/op:prod"))
        .unwrap_err();
    assert!(matches!(err, ImageError::NotFound { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("\"example.org/op:prod\""), "{message}");
    assert!(message.contains("it has example.org/op:dev"), "{message}");
    assert!(message.contains(&layout.display().to_string()), "{message}");
}

#[test]
fn a_tag_only_name_matches_a_reference_with_that_tag() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    layout_image(
        &layout,
        "dev",
        vec![gz(Layer::new().file("a", "dev"))],
        &ImageConfig::default(),
    );
    layout_image(
        &layout,
        "1.0",
        vec![gz(Layer::new().file("a", "1.0"))],
        &ImageConfig::default(),
    );
    let store = ImageStore::new(t.path().join("cache"));
    let image = store
        .unpack(&Source::Layout(layout.clone()), Some("example.org/op:dev"))
        .unwrap();
    assert_eq!(read(image.rootfs.join("a")), "dev");
    let image = store.unpack(&Source::Layout(layout), Some("dev")).unwrap();
    assert_eq!(read(image.rootfs.join("a")), "dev");
}

// ---------------------------------------------------------------------------------------
// Layers

#[test]
fn a_whiteout_removes_the_file_a_lower_layer_wrote() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let lower = Layer::new()
        .dir("a")
        .file("a/keep", "keep")
        .file("a/gone", "gone")
        .dir("a/gone-dir")
        .file("a/gone-dir/inner", "inner")
        .symlink("a/gone-link", "/a/keep");
    let upper = Layer::new()
        .file("a/.wh.gone", "")
        .file("a/.wh.gone-dir", "")
        .file("a/.wh.gone-link", "")
        .file("a/.wh.never-there", "");
    layout_image(
        &layout,
        "x:1",
        vec![gz(lower), gz(upper)],
        &ImageConfig::default(),
    );
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap();
    assert_eq!(tree(&image.rootfs), ["a", "a/keep"]);
    assert_eq!(read(image.rootfs.join("a/keep")), "keep");
}

#[test]
fn an_opaque_directory_keeps_only_what_its_own_layer_put_there() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let lower = Layer::new()
        .dir("o")
        .file("o/old", "old")
        .dir("o/sub")
        .file("o/sub/old", "old")
        .file("outside-o", "kept");
    // The layer's own entries come both before and after the opaque marker.
    let upper = Layer::new()
        .dir("o")
        .file("o/new", "new")
        .file("o/.wh..wh..opq", "")
        .dir("o/sub")
        .file("o/sub/new", "new");
    layout_image(
        &layout,
        "x:1",
        vec![gz(lower), gz(upper)],
        &ImageConfig::default(),
    );
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap();
    assert_eq!(
        tree(&image.rootfs),
        ["o", "o/new", "o/sub", "o/sub/new", "outside-o"]
    );
}

#[test]
fn gzip_and_plain_layers_are_both_read_whatever_their_media_type_says() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let first = Layer::new().file("from-gzip", "1");
    let second = Layer::new().file("from-plain", "2");
    // Media types that lie: the magic bytes decide.
    layout_image(
        &layout,
        "x:1",
        vec![
            (first.gzip(), MediaType::ImageLayer),
            (second.tar(), MediaType::ImageLayerGzip),
        ],
        &ImageConfig::default(),
    );
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap();
    assert_eq!(read(image.rootfs.join("from-gzip")), "1");
    assert_eq!(read(image.rootfs.join("from-plain")), "2");
}

#[test]
fn a_zstd_layer_is_refused_naming_the_layer_and_its_media_type() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let zstd = vec![0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0];
    layout_image(
        &layout,
        "x:1",
        vec![(zstd.clone(), MediaType::ImageLayerZstd)],
        &ImageConfig::default(),
    );
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(
            err,
            ImageError::LayerCompression {
                compression: "zstd",
                ..
            }
        ),
        "{err}"
    );
    assert!(message.contains(&digest::of(&zstd)), "{message}");
    assert!(
        message.contains("application/vnd.oci.image.layer.v1.tar+zstd"),
        "{message}"
    );
}

#[test]
fn files_keep_their_mode_time_and_links_and_devices_are_skipped() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let layer = Layer::new()
        .dir("bin")
        .file_mode("bin/tool", "tool", 0o4755)
        .file_mode("bin/private", "private", 0o600)
        .hardlink("bin/tool-again", "bin/tool")
        .symlink("bin/sh", "/bin/tool")
        .dir_mode("ro", 0o555)
        .file("ro/inside", "x")
        .special("dev-null", EntryType::Char)
        .special("disk", EntryType::Block)
        .special("pipe", EntryType::Fifo);
    layout_image(&layout, "x:1", vec![plain(layer)], &ImageConfig::default());
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap();
    let root = &image.rootfs;
    assert_eq!(
        tree(root),
        [
            "bin",
            "bin/private",
            "bin/sh",
            "bin/tool",
            "bin/tool-again",
            "ro",
            "ro/inside"
        ]
    );
    let tool = fs::metadata(root.join("bin/tool")).unwrap();
    assert_eq!(tool.permissions().mode() & 0o7777, 0o4755);
    assert_eq!(tool.mtime(), MTIME as i64);
    assert_eq!(tool.nlink(), 2);
    assert_eq!(
        fs::metadata(root.join("bin/tool-again")).unwrap().ino(),
        tool.ino()
    );
    let private = fs::metadata(root.join("bin/private")).unwrap();
    assert_eq!(private.permissions().mode() & 0o7777, 0o600);
    assert_eq!(
        fs::read_link(root.join("bin/sh")).unwrap(),
        Path::new("/bin/tool")
    );
    let ro = fs::metadata(root.join("ro")).unwrap();
    assert_eq!(ro.permissions().mode() & 0o7777, 0o555);
    assert_eq!(ro.mtime(), MTIME as i64, "directory times are set last");
    assert_eq!(
        fs::symlink_metadata(root.join("bin")).unwrap().mtime(),
        MTIME as i64
    );
}

#[test]
fn ownership_is_kept_when_running_as_root() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let layer = Layer::new().file_owned("owned", "x", 1234, 5678);
    layout_image(&layout, "x:1", vec![plain(layer)], &ImageConfig::default());
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap();
    let meta = fs::metadata(image.rootfs.join("owned")).unwrap();
    if is_root() {
        assert_eq!((meta.uid(), meta.gid()), (1234, 5678));
    } else {
        // Only root can give files away: they are the unpacking user's.
        assert_eq!(meta.uid(), fs::metadata(t.path()).unwrap().uid());
    }
}

#[test]
fn an_escaping_layer_writes_nothing_outside_the_root() {
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), "untouched").unwrap();
    let outside_abs = outside.to_str().unwrap();

    let layout = t.path().join("layout");
    // The root is <t>/cache/rootfs/<hex>: `../../..` from it is <t>.
    let lower = Layer::new()
        .raw(EntryType::Regular, "../../../dotdot", "", "x")
        .raw(EntryType::Regular, "/absolute", "", "x")
        .symlink("abs-link", outside_abs)
        .symlink("up-link", "../../..")
        .symlink("secret-link", &format!("{outside_abs}/secret"));
    let upper = Layer::new()
        .file("abs-link/through-abs", "x")
        .file("up-link/through-up", "x")
        .raw(EntryType::Regular, "up-link/../../../through-both", "", "x")
        // Replaces the symlink; does not write through it.
        .file("secret-link", "overwritten");
    layout_image(
        &layout,
        "x:1",
        vec![gz(lower), gz(upper)],
        &ImageConfig::default(),
    );
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap();
    let root = &image.rootfs;

    assert_eq!(tree(&outside), ["secret"]);
    assert_eq!(read(outside.join("secret")), "untouched");
    let mut top: Vec<String> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["cache", "layout", "outside"]);

    // Everything landed inside the root, where a chroot would have put it.
    assert!(root.join("dotdot").is_file());
    assert!(root.join("absolute").is_file());
    assert!(
        root.join(outside_abs.trim_start_matches('/'))
            .join("through-abs")
            .is_file()
    );
    assert!(root.join("through-up").is_file());
    assert!(root.join("through-both").is_file());
    assert_eq!(read(root.join("secret-link")), "overwritten");
    assert!(
        !fs::symlink_metadata(root.join("secret-link"))
            .unwrap()
            .is_symlink()
    );
}

#[test]
fn a_symlink_loop_is_an_error_not_a_hang() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let layer = Layer::new()
        .symlink("loop-a", "loop-b")
        .symlink("loop-b", "/loop-a")
        .file("loop-a/x", "x");
    layout_image(&layout, "x:1", vec![plain(layer)], &ImageConfig::default());
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::Layer { .. }), "{err}");
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("symbolic links"), "{cause}");
}

#[test]
fn a_hard_link_cannot_reach_a_file_outside_the_root() {
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), "untouched").unwrap();
    let outside_abs = outside.to_str().unwrap();
    let store = ImageStore::new(t.path().join("cache"));

    for (i, layer) in [
        Layer::new()
            .symlink("abs-link", outside_abs)
            .hardlink("stolen", "abs-link/secret"),
        Layer::new().raw(EntryType::Link, "stolen", "../../../outside/secret", ""),
        Layer::new().raw(
            EntryType::Link,
            "stolen",
            &format!("{outside_abs}/secret"),
            "",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let layout = t.path().join(format!("layout{i}"));
        layout_image(&layout, "x:1", vec![plain(layer)], &ImageConfig::default());
        let err = store.unpack(&Source::Layout(layout), None).unwrap_err();
        assert!(matches!(err, ImageError::Layer { .. }), "{err}");
        assert!(err.to_string().contains("stolen"), "{err}");
    }
    assert_eq!(fs::metadata(outside.join("secret")).unwrap().nlink(), 1);
    assert_eq!(read(outside.join("secret")), "untouched");
    // Failed unpacks leave nothing behind.
    assert!(tree(&t.path().join("cache/rootfs")).is_empty());
}

// ---------------------------------------------------------------------------------------
// Verification and bad input

#[test]
fn a_blob_that_does_not_match_its_digest_is_an_error_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let layer = Layer::new().file("a", "original");
    let bytes = layer.gzip();
    let layer_digest = digest::of(&bytes);
    layout_image(
        &layout,
        "x:1",
        vec![(bytes, MediaType::ImageLayerGzip)],
        &ImageConfig::default(),
    );
    // Same length, other content: a tampered layer.
    let tampered = Layer::new().file("a", "tampered");
    let tampered = tampered.gzip();
    let blob = layout.join("blobs/sha256").join(hex(&layer_digest));
    fs::write(&blob, &tampered).unwrap();

    let store = ImageStore::new(t.path().join("cache"));
    let err = store.unpack(&Source::Layout(layout), None).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(
            err,
            ImageError::DigestMismatch { .. } | ImageError::SizeMismatch { .. }
        ),
        "{err}"
    );
    assert!(message.contains(&layer_digest), "{message}");
    assert!(tree(&t.path().join("cache/rootfs")).is_empty());
}

#[test]
fn a_tampered_manifest_is_refused_before_any_layer_is_read() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let manifest = layout_image(
        &layout,
        "x:1",
        vec![gz(Layer::new().file("a", "a"))],
        &ImageConfig::default(),
    );
    let blob = layout
        .join("blobs/sha256")
        .join(hex(manifest.digest().as_ref()));
    let mut text = read(&blob);
    text = text.replacen("\"schemaVersion\":2", "\"schemaVersion\":3", 1);
    fs::write(&blob, text).unwrap();
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains(manifest.digest().as_ref()),
        "{err}"
    );
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let t = tempfile::tempdir().unwrap();
    let store = ImageStore::new(t.path().join("cache"));
    let good = t.path().join("good");
    layout_image(
        &good,
        "x:1",
        vec![plain(Layer::new().file("a", &"a".repeat(5000)))],
        &ImageConfig::default(),
    );

    // Not there, not a directory, not an image.
    let missing = store.unpack(&Source::Layout(t.path().join("nope")), None);
    assert!(matches!(missing, Err(ImageError::Read { .. })));
    let file = t.path().join("file");
    fs::write(&file, "not a tar").unwrap();
    assert!(store.unpack(&Source::Layout(file.clone()), None).is_err());
    let empty = t.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let err = store
        .unpack(&Source::Layout(empty.clone()), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::UnknownFormat { .. }), "{err}");
    assert!(store.unpack(&Source::Archive(file), None).is_err());

    // Bad JSON.
    let bad_json = t.path().join("bad-json");
    fs::create_dir(&bad_json).unwrap();
    fs::write(
        bad_json.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    fs::write(bad_json.join("index.json"), "{ not json").unwrap();
    let err = store
        .unpack(&Source::Layout(bad_json.clone()), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::Json { .. }), "{err}");
    assert!(err.to_string().contains("index.json"), "{err}");
    fs::write(
        bad_json.join("oci-layout"),
        r#"{"imageLayoutVersion":"2.0.0"}"#,
    )
    .unwrap();
    let err = store.unpack(&Source::Layout(bad_json), None).unwrap_err();
    assert!(matches!(err, ImageError::LayoutVersion { .. }), "{err}");

    // A missing blob.
    let no_blob = t.path().join("no-blob");
    let manifest = layout_image(
        &no_blob,
        "x:1",
        vec![gz(Layer::new().file("a", "a"))],
        &ImageConfig::default(),
    );
    let manifest_path = no_blob
        .join("blobs/sha256")
        .join(hex(manifest.digest().as_ref()));
    fs::remove_file(&manifest_path).unwrap();
    let err = store.unpack(&Source::Layout(no_blob), None).unwrap_err();
    assert!(matches!(err, ImageError::Missing { .. }), "{err}");
    assert!(
        err.to_string().contains(hex(manifest.digest().as_ref())),
        "{err}"
    );

    // Truncated archives, at every few hundred bytes.
    let archive = t.path().join("good.tar");
    tar_dir(&good, &archive);
    let bytes = fs::read(&archive).unwrap();
    let cut = t.path().join("cut.tar");
    // Not into the last member's padding or the end-of-archive blocks: cut there, the
    // archive is whole.
    for len in (0..bytes.len() - 1536).step_by(700) {
        fs::write(&cut, &bytes[..len]).unwrap();
        assert!(
            store.unpack(&Source::Archive(cut.clone()), None).is_err(),
            "an archive cut at {len} of {} bytes unpacked",
            bytes.len()
        );
    }
    // A truncated layer blob in a layout.
    let image = store.unpack(&Source::Layout(good.clone()), None).unwrap();
    fs::remove_dir_all(&image.rootfs).unwrap();
    for entry in fs::read_dir(good.join("blobs/sha256")).unwrap() {
        let path = entry.unwrap().path();
        let content = fs::read(&path).unwrap();
        if content.len() > 2048 {
            fs::write(&path, &content[..1536]).unwrap();
        }
    }
    let err = store.unpack(&Source::Layout(good), None).unwrap_err();
    assert!(matches!(err, ImageError::SizeMismatch { .. }), "{err}");
}

/// Tars the directory `dir` into `archive`, as skopeo's oci-archive does with a layout.
fn tar_dir(dir: &Path, archive: &Path) {
    let mut builder = tar::Builder::new(fs::File::create(archive).unwrap());
    builder.append_dir_all(".", dir).unwrap();
    builder.into_inner().unwrap();
}

#[test]
fn an_oci_archive_unpacks_like_its_layout() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    layout_image(
        &layout,
        "example.org/op:dev",
        vec![gz(Layer::new()
            .dir("etc")
            .file("etc/os-release", "ID=test\n"))],
        &ImageConfig {
            cmd: vec!["sh".into()],
            ..ImageConfig::default()
        },
    );
    let archive = t.path().join("op.tar");
    tar_dir(&layout, &archive);
    let store = ImageStore::new(t.path().join("cache"));
    let from_archive = store
        .unpack(&Source::Archive(archive), Some("example.org/op:dev"))
        .unwrap();
    assert_eq!(
        read(from_archive.rootfs.join("etc/os-release")),
        "ID=test\n"
    );
    assert_eq!(from_archive.config.cmd, ["sh"]);
    let from_layout = store.unpack(&Source::Layout(layout), None).unwrap();
    assert_eq!(from_layout, from_archive);
}

// ---------------------------------------------------------------------------------------
// Multi-platform images

/// An architecture that is not this machine's.
fn other_arch() -> &'static str {
    if platform::this_arch() == "s390x" {
        "riscv64"
    } else {
        "s390x"
    }
}

/// Writes an index with an image for `archs` each (a file `which` saying the arch) and
/// an attestation manifest, tagged `multi:1`.
fn multi_platform_layout(dir: &Path, archs: &[&str]) {
    let writer = LayoutWriter::create(dir).unwrap();
    let mut manifests = Vec::new();
    for arch in archs {
        let layer = writer
            .add_blob(
                &Layer::new().file("which", arch).gzip(),
                MediaType::ImageLayerGzip,
            )
            .unwrap();
        let mut config = image_configuration(&ImageConfig::default(), Vec::new());
        config.set_architecture(Arch::from(*arch));
        let mut manifest = writer.add_image(&config, vec![layer]).unwrap();
        manifest.set_platform(Some(
            PlatformBuilder::default()
                .architecture(Arch::from(*arch))
                .os(Os::Linux)
                .build()
                .unwrap(),
        ));
        manifests.push(manifest);
    }
    // What buildx adds: an attestation manifest for platform unknown/unknown.
    let mut attestation = manifests[0].clone();
    attestation.set_platform(Some(
        PlatformBuilder::default()
            .architecture(Arch::from("unknown"))
            .os(Os::from("unknown"))
            .build()
            .unwrap(),
    ));
    manifests.push(attestation);
    let mut index = ImageIndex::default();
    index.set_media_type(Some(MediaType::ImageIndex));
    index.set_manifests(manifests);
    let index = writer
        .add_blob(&serde_json::to_vec(&index).unwrap(), MediaType::ImageIndex)
        .unwrap();
    writer.tag(index, "multi:1").unwrap();
}

#[test]
fn a_multi_platform_index_picks_this_machines_manifest() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    multi_platform_layout(&layout, &[other_arch(), platform::this_arch()]);
    let image = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), Some("multi:1"))
        .unwrap();
    assert_eq!(read(image.rootfs.join("which")), platform::this_arch());
}

#[test]
fn a_multi_platform_index_without_this_platform_names_the_platforms_it_has() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    multi_platform_layout(&layout, &[other_arch()]);
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::Platform { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("linux/{}", other_arch()))
            && message.contains("unknown/unknown")
            && message.contains(&platform::wanted())
            && message.contains("multi:1"),
        "{message}"
    );
}

#[test]
fn an_image_whose_config_is_for_another_machine_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let writer = LayoutWriter::create(&layout).unwrap();
    let layer = writer
        .add_blob(&Layer::new().file("a", "a").tar(), MediaType::ImageLayer)
        .unwrap();
    let mut config = image_configuration(&ImageConfig::default(), Vec::new());
    config.set_architecture(Arch::from(other_arch()));
    let manifest = writer.add_image(&config, vec![layer]).unwrap();
    writer.tag(manifest, "x:1").unwrap();
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Layout(layout), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::Platform { .. }), "{err}");
    assert!(err.to_string().contains(other_arch()), "{err}");
}

// ---------------------------------------------------------------------------------------
// docker save archives

/// A docker image config for this machine with `diff_ids`.
fn docker_config(diff_ids: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": platform::this_arch(),
        "os": "linux",
        "config": {
            "Hostname": "",
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["sh"],
            "Entrypoint": null,
            "WorkingDir": "",
            "User": "",
            "Volumes": null,
            "OnBuild": null,
            "Labels": null
        },
        "created": "2024-01-01T00:00:00Z",
        "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "ADD rootfs /"}],
        "rootfs": {"type": "layers", "diff_ids": diff_ids}
    }))
    .unwrap()
}

#[test]
fn a_legacy_docker_save_archive_unpacks() {
    let t = tempfile::tempdir().unwrap();
    let base = Layer::new().dir("bin").file("bin/sh", "busybox").tar();
    let top = Layer::new()
        .file("etc-motd", "hi")
        .file("bin/.wh.sh", "")
        .tar();
    let (base_id, top_id, again_id) = ("1".repeat(64), "2".repeat(64), "3".repeat(64));
    let diff_ids = [digest::of(&base), digest::of(&top), digest::of(&base)];
    let config = docker_config(&diff_ids);
    let config_hex = hex(&digest::of(&config)).to_owned();
    let manifest = serde_json::json!([{
        "Config": format!("{config_hex}.json"),
        "RepoTags": ["example.org/op:dev", "example.org/op:latest"],
        "Layers": [
            format!("{base_id}/layer.tar"),
            format!("{top_id}/layer.tar"),
            format!("{again_id}/layer.tar"),
        ]
    }]);
    let archive = t.path().join("op.tar");
    write_archive(
        &archive,
        &[
            (format!("{config_hex}.json"), config.clone()),
            (format!("{base_id}/layer.tar"), base),
            (format!("{base_id}/VERSION"), b"1.0".to_vec()),
            (format!("{top_id}/layer.tar"), top),
            (
                "manifest.json".to_owned(),
                serde_json::to_vec(&manifest).unwrap(),
            ),
            ("repositories".to_owned(), b"{}".to_vec()),
        ],
        // docker links a repeated layer to its first copy.
        &[(
            format!("{again_id}/layer.tar"),
            format!("../{base_id}/layer.tar"),
        )],
    );

    let store = ImageStore::new(t.path().join("cache"));
    let source = Source::Archive(archive.clone());
    let image = store.unpack(&source, Some("example.org/op:dev")).unwrap();
    assert_eq!(image.digest, format!("sha256:{config_hex}"));
    assert_eq!(read(image.rootfs.join("bin/sh")), "busybox");
    assert_eq!(read(image.rootfs.join("etc-motd")), "hi");
    assert_eq!(image.config.cmd, ["sh"]);
    assert_eq!(image.config.entrypoint, Vec::<String>::new());
    assert_eq!(image.config.working_dir, None);
    assert_eq!(image.config.user, None);
    assert_eq!(store.unpack(&source, None).unwrap(), image);
    let err = store
        .unpack(&source, Some("example.org/op:prod"))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("example.org/op:dev, example.org/op:latest"),
        "{err}"
    );
}

#[test]
fn a_legacy_docker_layer_that_does_not_match_its_diff_id_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let layer = Layer::new().file("a", "real").tar();
    let claimed = digest::of(b"something else");
    let config = docker_config(std::slice::from_ref(&claimed));
    let config_hex = hex(&digest::of(&config)).to_owned();
    let id = "1".repeat(64);
    let manifest = serde_json::json!([{
        "Config": format!("{config_hex}.json"),
        "RepoTags": null,
        "Layers": [format!("{id}/layer.tar")]
    }]);
    let archive = t.path().join("op.tar");
    write_archive(
        &archive,
        &[
            (format!("{config_hex}.json"), config),
            (format!("{id}/layer.tar"), layer),
            (
                "manifest.json".to_owned(),
                serde_json::to_vec(&manifest).unwrap(),
            ),
        ],
        &[],
    );
    let err = ImageStore::new(t.path().join("cache"))
        .unpack(&Source::Archive(archive), None)
        .unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains(&claimed), "{err}");
}

/// Writes the contents of a docker 25+ `docker save` archive of one image into `dir`:
/// `blobs/sha256/`, `manifest.json`, and, when `with_oci_index`, `oci-layout` and an
/// `index.json` naming the image as docker does.
fn docker25_dir(dir: &Path, with_oci_index: bool) -> String {
    let writer = LayoutWriter::create(dir).unwrap();
    let layer_bytes = Layer::new().dir("bin").file("bin/sh", "busybox").tar();
    let layer = writer
        .add_blob(&layer_bytes, MediaType::ImageLayer)
        .unwrap();
    let config_bytes = docker_config(&[digest::of(&layer_bytes)]);
    let config = writer
        .add_blob(&config_bytes, MediaType::ImageConfig)
        .unwrap();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": [layer],
    });
    let manifest = writer
        .add_blob(
            &serde_json::to_vec(&manifest).unwrap(),
            MediaType::ImageManifest,
        )
        .unwrap();
    let saved = serde_json::json!([{
        "Config": format!("blobs/sha256/{}", hex(config.digest().as_ref())),
        "RepoTags": ["busybox:latest"],
        "Layers": [format!("blobs/sha256/{}", hex(layer.digest().as_ref()))],
        "LayerSources": {}
    }]);
    fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&saved).unwrap(),
    )
    .unwrap();
    if with_oci_index {
        let mut entry = manifest.clone();
        entry.set_annotations(Some(HashMap::from([
            (
                "io.containerd.image.name".to_owned(),
                "docker.io/library/busybox:latest".to_owned(),
            ),
            (
                "org.opencontainers.image.ref.name".to_owned(),
                "latest".to_owned(),
            ),
        ])));
        let mut index = ImageIndex::default();
        index.set_manifests(vec![entry]);
        writer.write_index(&index).unwrap();
    } else {
        fs::remove_file(dir.join("oci-layout")).unwrap();
    }
    config.digest().to_string()
}

#[test]
fn a_docker_25_save_archive_unpacks_by_its_containerd_name() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("saved");
    let config_digest = docker25_dir(&dir, true);
    let archive = t.path().join("busybox.tar");
    tar_dir(&dir, &archive);
    let store = ImageStore::new(t.path().join("cache"));
    let source = Source::Archive(archive);
    for reference in [
        Some("busybox"),
        Some("docker.io/library/busybox:latest"),
        None,
    ] {
        let image = store.unpack(&source, reference).unwrap();
        assert_eq!(image.digest, config_digest);
        assert_eq!(read(image.rootfs.join("bin/sh")), "busybox");
        assert_eq!(image.config.cmd, ["sh"]);
    }
    // The bare tag annotation does not make any reference tagged latest match.
    let err = store.unpack(&source, Some("alpine")).unwrap_err();
    assert!(matches!(err, ImageError::NotFound { .. }), "{err}");
}

#[test]
fn a_docker_save_manifest_naming_blobs_is_read_without_an_oci_index() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("saved");
    let config_digest = docker25_dir(&dir, false);
    let archive = t.path().join("busybox.tar");
    tar_dir(&dir, &archive);
    let store = ImageStore::new(t.path().join("cache"));
    let image = store
        .unpack(&Source::Archive(archive), Some("busybox"))
        .unwrap();
    assert_eq!(image.digest, config_digest);
    assert_eq!(read(image.rootfs.join("bin/sh")), "busybox");
    // An extracted archive is a source too.
    let from_dir = store.unpack(&Source::Layout(dir), None).unwrap();
    assert_eq!(from_dir, image);
}

// ---------------------------------------------------------------------------------------
// The cache

#[test]
fn a_second_unpack_of_the_same_image_reads_no_layer() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let bytes = Layer::new().file("a", "a").gzip();
    let layer_digest = digest::of(&bytes);
    layout_image(
        &layout,
        "x:1",
        vec![(bytes, MediaType::ImageLayerGzip)],
        &ImageConfig::default(),
    );
    let store = ImageStore::new(t.path().join("cache"));
    let source = Source::Layout(layout.clone());
    let first = store.unpack(&source, None).unwrap();
    fs::write(first.rootfs.join("marker"), "still here").unwrap();
    let mtime = fs::metadata(&first.rootfs).unwrap().mtime_nsec();

    // The layer is gone: a second unpack must not need it.
    fs::remove_file(layout.join("blobs/sha256").join(hex(&layer_digest))).unwrap();
    let second = store.unpack(&source, None).unwrap();
    assert_eq!(second, first);
    assert_eq!(read(second.rootfs.join("marker")), "still here");
    assert_eq!(fs::metadata(&second.rootfs).unwrap().mtime_nsec(), mtime);
    assert_eq!(tree(&t.path().join("cache/rootfs")).len(), 3);
}

#[test]
fn two_threads_unpacking_the_same_image_both_succeed() {
    let t = tempfile::tempdir().unwrap();
    let layout = t.path().join("layout");
    let mut layer = Layer::new().dir("d");
    for i in 0..200 {
        layer = layer.file(&format!("d/file{i}"), &"x".repeat(i * 10));
    }
    layout_image(&layout, "x:1", vec![gz(layer)], &ImageConfig::default());
    let source = Source::Layout(layout);
    let cache = t.path().join("cache");
    let images: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| ImageStore::new(&cache).unpack(&source, None)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = images[0].as_ref().unwrap();
    for image in &images {
        assert_eq!(image.as_ref().unwrap(), first);
    }
    assert_eq!(fs::read_dir(first.rootfs.join("d")).unwrap().count(), 200);
    // Only the final directory is left: the losers' copies are gone.
    let left: Vec<PathBuf> = fs::read_dir(cache.join("rootfs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left, std::slice::from_ref(&first.rootfs));
}

// ---------------------------------------------------------------------------------------
// The Docker engine

mod engine {
    use super::*;
    use crate::{DockerEngine, EngineError};
    use sim_test_support::docker_engine::StandInEngine;

    /// A legacy `docker save` archive of one image tagged `tag`, with one layer holding
    /// `files` and the config `docker_config` writes; and its config digest (the image id).
    pub(super) fn docker_save(tag: &str, files: &[(&str, &str)]) -> (Vec<u8>, String) {
        let mut layer = Layer::new().dir("etc");
        for (path, content) in files {
            layer = layer.file(path, content);
        }
        let layer = layer.tar();
        let config = docker_config(&[digest::of(&layer)]);
        let config_digest = digest::of(&config);
        let config_name = format!("{}.json", hex(&config_digest));
        let layer_name = format!("{}/layer.tar", "1".repeat(64));
        let manifest = serde_json::json!([{
            "Config": config_name,
            "RepoTags": [tag],
            "Layers": [layer_name],
        }]);
        let mut builder = tar::Builder::new(Vec::new());
        for (name, content) in [
            (config_name.as_str(), config),
            (layer_name.as_str(), layer),
            ("manifest.json", serde_json::to_vec(&manifest).unwrap()),
        ] {
            let mut h = header(EntryType::Regular, 0o644, content.len() as u64);
            builder.append_data(&mut h, name, &content[..]).unwrap();
        }
        (builder.into_inner().unwrap(), config_digest)
    }

    /// The container config the engine's inspection gives for [`docker_config`].
    fn inspected_config() -> serde_json::Value {
        serde_json::json!({
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["sh"],
            "Entrypoint": null,
            "WorkingDir": "",
            "User": "",
        })
    }

    #[tokio::test]
    async fn an_image_of_the_engine_is_exported_once_and_then_found_in_the_cache() {
        let engine = StandInEngine::start();
        let (archive, id) = docker_save("example.org/op:dev", &[("etc/motd", "from the engine")]);
        engine.add(&["example.org/op:dev"], &id, inspected_config(), archive);
        let t = tempfile::tempdir().unwrap();
        let store = ImageStore::new(t.path().join("cache"));
        let docker = DockerEngine::unix(engine.socket());

        let image = store
            .engine_image(&docker, "example.org/op:dev")
            .await
            .unwrap()
            .expect("the engine has the image");
        assert_eq!(image.digest, id);
        assert_eq!(read(image.rootfs.join("etc/motd")), "from the engine");
        assert_eq!(image.config.cmd, ["sh"]);
        assert_eq!(engine.exports(), 1);

        let again = store
            .engine_image(&docker, "example.org/op:dev")
            .await
            .unwrap()
            .expect("the engine still has the image");
        assert_eq!(again, image);
        assert_eq!(engine.exports(), 1, "the second lookup exported it again");
        // The export's archive is gone; what is left is the record and the root filesystem.
        let downloads = t.path().join("cache/downloads");
        assert_eq!(fs::read_dir(&downloads).unwrap().count(), 0);
        assert_eq!(
            read(t.path().join("cache/engine").join(hex(&id))),
            id,
            "the record names the config digest"
        );
    }

    #[tokio::test]
    async fn an_image_the_engine_lacks_and_an_engine_that_is_not_there_are_both_none() {
        let engine = StandInEngine::start();
        let t = tempfile::tempdir().unwrap();
        let store = ImageStore::new(t.path().join("cache"));
        let lacking = store
            .engine_image(&DockerEngine::unix(engine.socket()), "busybox:1.36")
            .await
            .unwrap();
        assert_eq!(lacking, None);
        // No socket at all.
        let missing = store
            .engine_image(&DockerEngine::unix(t.path().join("docker.sock")), "busybox")
            .await
            .unwrap();
        assert_eq!(missing, None);
        // A socket nobody listens on any more: the connection is refused.
        let stale = t.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let refused = store
            .engine_image(&DockerEngine::unix(&stale), "busybox")
            .await
            .unwrap();
        assert_eq!(refused, None);
        assert!(!t.path().join("cache").exists(), "nothing was written");
    }

    #[tokio::test]
    async fn an_engine_answering_with_an_error_is_an_error_naming_the_engine_and_the_image() {
        let engine = StandInEngine::start();
        engine.fail_with(500, "layer store is corrupt");
        let t = tempfile::tempdir().unwrap();
        let docker = DockerEngine::unix(engine.socket());
        let err = ImageStore::new(t.path())
            .engine_image(&docker, "busybox:1.36")
            .await
            .unwrap_err();
        assert!(
            matches!(err, EngineError::Status { status: 500, .. }),
            "{err}"
        );
        let text = err.to_string();
        for part in [
            docker.address().as_str(),
            "busybox:1.36",
            "layer store is corrupt",
            "GET /images/busybox:1.36/json",
        ] {
            assert!(text.contains(part), "{part} missing from: {text}");
        }
    }

    #[tokio::test]
    async fn an_export_that_is_not_an_image_is_an_error_and_leaves_nothing_behind() {
        let engine = StandInEngine::start();
        let id = digest::of(b"not a config");
        engine.add(
            &["broken:1"],
            &id,
            inspected_config(),
            b"not a tar".to_vec(),
        );
        let t = tempfile::tempdir().unwrap();
        let err = ImageStore::new(t.path().join("cache"))
            .engine_image(&DockerEngine::unix(engine.socket()), "broken:1")
            .await
            .unwrap_err();
        assert!(matches!(err, EngineError::Unpack { .. }), "{err}");
        assert!(err.to_string().contains("broken:1"), "{err}");
        assert_eq!(
            fs::read_dir(t.path().join("cache/downloads"))
                .unwrap()
                .count(),
            0
        );
        assert!(!t.path().join("cache/engine").join(hex(&id)).exists());
    }

    #[tokio::test]
    async fn lookups_of_one_image_at_once_export_it_once() {
        let engine = StandInEngine::start();
        let (archive, id) = docker_save("example.org/op:dev", &[("etc/motd", "once")]);
        engine.add(&["example.org/op:dev"], &id, inspected_config(), archive);
        let t = tempfile::tempdir().unwrap();
        let docker = DockerEngine::unix(engine.socket());
        // Stores of their own on one cache, as the kubelets of one cluster have.
        let lookups = (0..4).map(|_| {
            let store = ImageStore::new(t.path().join("cache"));
            let docker = docker.clone();
            tokio::spawn(async move { store.engine_image(&docker, "example.org/op:dev").await })
        });
        let images = futures::future::join_all(lookups).await;
        for image in images {
            let image = image.unwrap().unwrap().expect("the engine has the image");
            assert_eq!(image.digest, id);
        }
        assert_eq!(engine.exports(), 1);
    }

    #[tokio::test]
    async fn a_reference_with_characters_no_image_name_has_is_refused_before_any_request() {
        let engine = StandInEngine::start();
        let err = ImageStore::new(tempfile::tempdir().unwrap().path())
            .engine_image(
                &DockerEngine::unix(engine.socket()),
                "../../containers/json",
            )
            .await
            .unwrap_err();
        assert!(matches!(err, EngineError::Reference { .. }), "{err}");
    }

    /// One request to a real engine, as HTTP/1.0 (the engine closes the connection after
    /// its answer): the status and the body.
    fn raw_request(
        socket: &Path,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> io::Result<(u16, Vec<u8>)> {
        let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Type: application/x-tar\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )?;
        stream.write_all(body)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let head_end = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| io::Error::other("no end of headers in the engine's answer"))?;
        let status = String::from_utf8_lossy(&answer[..head_end])
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other("no status in the engine's answer"))?;
        Ok((status, answer[head_end + 4..].to_vec()))
    }

    /// Removes an image from a real engine when dropped, also on a failure.
    struct Loaded<'a> {
        socket: &'a Path,
        tag: String,
    }

    impl Drop for Loaded<'_> {
        fn drop(&mut self) {
            let path = format!("/images/{}?force=1", self.tag);
            match raw_request(self.socket, "DELETE", &path, &[]) {
                Ok((200, _)) => {}
                other => eprintln!("cannot remove {} from the engine: {other:?}", self.tag),
            }
        }
    }

    /// Against the engine `DOCKER_HOST` (or the default socket) names, when one answers:
    /// `cargo test -p oci-image --lib -- --ignored a_real_engine`. It loads a small image
    /// into the engine (`POST /images/load`), resolves it, and removes it.
    #[tokio::test]
    #[ignore = "needs a running docker engine: cargo test -p oci-image --lib -- --ignored a_real_engine"]
    async fn a_real_engine_exports_an_image_loaded_into_it() {
        let docker = DockerEngine::from_env().expect("DOCKER_HOST names a unix socket");
        match raw_request(docker.socket(), "GET", "/_ping", &[]) {
            Ok((200, _)) => {}
            other => {
                eprintln!(
                    "not run: no docker engine answers at {}: {other:?}",
                    docker.address()
                );
                return;
            }
        }
        let tag = format!("opconform-test/engine:{}", std::process::id());
        let (archive, config_digest) = docker_save(&tag, &[("etc/motd", "from a real engine")]);
        let (status, answer) =
            raw_request(docker.socket(), "POST", "/images/load?quiet=1", &archive).unwrap();
        let loaded = Loaded {
            socket: docker.socket(),
            tag: tag.clone(),
        };
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            status == 200 && !answer.contains("errorDetail"),
            "{status}: {answer}"
        );

        let t = tempfile::tempdir().unwrap();
        let store = ImageStore::new(t.path().join("cache"));
        let image = store
            .engine_image(&docker, &tag)
            .await
            .unwrap()
            .expect("the engine has the image just loaded");
        assert_eq!(image.digest, config_digest);
        assert_eq!(read(image.rootfs.join("etc/motd")), "from a real engine");
        assert_eq!(image.config.cmd, ["sh"]);
        assert_eq!(
            store.engine_image(&docker, &tag).await.unwrap(),
            Some(image)
        );
        let unknown = format!("opconform-test/absent:{}", std::process::id());
        assert_eq!(store.engine_image(&docker, &unknown).await.unwrap(), None);
        drop(loaded);
    }
}
