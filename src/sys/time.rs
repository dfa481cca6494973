//! The C library's view of local time.

/// The local UTC offset in seconds and the zone abbreviation at `secs`
/// since the epoch, from the C library's `TZ` and /etc/localtime handling
/// (`localtime_r`: rustix has no time zones). `(0, None)` when it fails.
pub fn local_offset(secs: i64) -> (i64, Option<String>) {
    let t = secs as libc::time_t;
    // SAFETY: `tm` is plain integers and a pointer, valid all-zero;
    // localtime_r writes only into it. tm_zone, when set, points at a
    // NUL-terminated string in static storage inside the C library, read
    // before this function returns.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return (0, None);
        }
        let zone = (!tm.tm_zone.is_null()).then(|| {
            std::ffi::CStr::from_ptr(tm.tm_zone)
                .to_string_lossy()
                .into_owned()
        });
        (tm.tm_gmtoff as i64, zone)
    }
}
