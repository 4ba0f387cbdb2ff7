//! Node-API link arguments for the platform (macOS needs
//! `-undefined dynamic_lookup`; elsewhere nothing).
fn main() {
    napi_build::setup();
}
