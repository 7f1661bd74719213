//! A clear error instead of wgpu's adapter panic when no Vulkan driver is installed (Linux).
//!
//! The `wgpu` feature runs the kernels through Vulkan. On a machine without a GPU, wgpu needs
//! Mesa's software driver (lavapipe): `apt-get install -y mesa-vulkan-drivers libvulkan1`.
//! Without any driver, Burn's wgpu device panics deep inside its adapter selection with a
//! message that does not name the fix; the tests call [`require_driver`] before they make
//! their wgpu device.

/// Where the Vulkan loader looks for driver manifests on Linux, besides `$XDG_DATA_DIRS` and
/// `$XDG_CONFIG_DIRS`.
const ICD_DIRS: &[&str] = &[
    "/usr/share/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/etc/vulkan/icd.d",
];

/// Where Debian, Ubuntu, Fedora and Arch install the Vulkan loader (`libvulkan.so.1`).
const LOADER_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
];

/// `Ok` where a Vulkan loader and at least one driver manifest are found (always on other
/// systems than Linux, and when `VK_ICD_FILENAMES` or `VK_DRIVER_FILES` names the drivers);
/// otherwise what is missing and how to install it.
pub fn driver_found() -> Result<(), String> {
    if !cfg!(target_os = "linux")
        || std::env::var_os("VK_ICD_FILENAMES").is_some()
        || std::env::var_os("VK_DRIVER_FILES").is_some()
    {
        return Ok(());
    }
    let loader = LOADER_DIRS
        .iter()
        .any(|dir| std::path::Path::new(dir).join("libvulkan.so.1").exists());
    let xdg = |var: &str, default: &str| {
        std::env::var(var)
            .unwrap_or_else(|_| default.to_string())
            .split(':')
            .map(|dir| format!("{dir}/vulkan/icd.d"))
            .collect::<Vec<_>>()
    };
    let mut dirs: Vec<String> = ICD_DIRS.iter().map(|d| d.to_string()).collect();
    dirs.extend(xdg("XDG_DATA_DIRS", "/usr/local/share:/usr/share"));
    dirs.extend(xdg("XDG_CONFIG_DIRS", "/etc/xdg"));
    let manifest = dirs.iter().any(|dir| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
    });
    match (loader, manifest) {
        (true, true) => Ok(()),
        (loader, _) => Err(format!(
            "no Vulkan {} found: the `wgpu` feature runs the kernels through Vulkan. Install a \
             driver: on a machine without a GPU, Mesa's software driver, \
             `apt-get install -y mesa-vulkan-drivers libvulkan1` (Debian, Ubuntu), or use \
             `--features cuda` on an NVIDIA GPU, or plain `cargo test` for the NdArray tests",
            if loader {
                "driver"
            } else {
                "loader (libvulkan.so.1)"
            }
        )),
    }
}

/// Panics where no Vulkan driver is installed, with the command that installs one (see
/// [`driver_found`]).
pub fn require_driver() {
    if let Err(why) = driver_found() {
        panic!("=== burn-fused-head error ===\n  Operation: 'wgpu device'\n  Reason: {why}");
    }
}
