//! The chaos soak, short (integration/src/soak): two converge processes,
//! the conformance workers of all four languages and a noop worker, a mixed
//! workload and random faults for `CONVERGE_SOAK_SECS` (default 150 s),
//! then every invariant. The recorded long run is `converge-soak --secs
//! 1800` (docs/scaling.md).

use std::time::Duration;

use converge_integration::soak::{self, SoakOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_soak_with_faults_breaks_no_invariant() -> anyhow::Result<()> {
    let secs = std::env::var("CONVERGE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let options = SoakOptions {
        duration: Duration::from_secs(secs),
        ..SoakOptions::default()
    };
    let report = soak::run(&options).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if secs >= 120 {
        assert_eq!(
            report.faults.len(),
            converge_integration::soak::site::FAULTS.len(),
            "every kind of fault: {:?}",
            report.faults
        );
    }
    assert!(report.applies.applied > 0 && report.watch.messages > 0, "{report:?}");
    assert!(report.violations.is_empty(), "violations: {:#?}", report.violations);
    Ok(())
}
