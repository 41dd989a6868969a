//! Validation cost of typical event writes against the embedded catalogs.
//! Target: well under 10 µs per valid write (schemas are compiled once).

use abstore_catalog::{Catalogs, Family};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;

fn validate(c: &mut Criterion) {
    let catalogs = Catalogs::embedded().expect("embedded catalogs compile");
    let agent = json!({"kind": "agent", "role": "plan", "session": "s_plan"});
    let kernel = json!({"kind": "kernel"});
    let plan = json!({"round": 1, "artifact": {"kind": "plan", "rev": 0}, "verifySteps": ["types", "unit"]});
    let observation = json!({
        "id": "o_1", "kind": "followup", "summary": "publish failed",
        "files": ["src/a.ts"], "refs": ["AUT-1"]
    });
    let tick = json!({
        "run": "dispatch-1", "queued": 2,
        "counters": {
            "merged": 0, "closed": 0, "conflicted": 0, "abandoned": 0, "discarded": 0,
            "janitorFailed": 0, "recovered": 0, "dispatchFailed": 0, "resumed": 0, "swept": 0,
            "dispatched": 0, "authored": 0, "bounced": 0, "claimRaces": 0, "invalidTickets": 0,
            "dependencyBlocked": 0, "harvestStarted": 0, "harvestResumed": 0,
            "harvestCompleted": 0, "harvestEscalated": 0, "harvestFailed": 0
        },
        "janitorDiagnostics": [], "ticketDiagnostics": [], "dependencyDiagnostics": []
    });
    let dispatcher = json!({"kind": "dispatcher"});
    let bad_plan = json!({"round": 1, "artifact": {"kind": "plan", "rev": -1}});

    c.bench_function("plan.completed valid", |b| {
        b.iter(|| {
            catalogs.validate(
                Family::Build,
                black_box(&agent),
                "plan.completed",
                black_box(&plan),
            )
        })
    });
    c.bench_function("observation.recorded valid", |b| {
        b.iter(|| {
            catalogs.validate(
                Family::Build,
                black_box(&kernel),
                "observation.recorded",
                black_box(&observation),
            )
        })
    });
    c.bench_function("dispatcher.tick-completed valid", |b| {
        b.iter(|| {
            catalogs.validate(
                Family::Repository,
                black_box(&dispatcher),
                "dispatcher.tick-completed",
                black_box(&tick),
            )
        })
    });
    c.bench_function("plan.completed invalid (message built)", |b| {
        b.iter(|| {
            catalogs.validate(
                Family::Build,
                black_box(&agent),
                "plan.completed",
                black_box(&bad_plan),
            )
        })
    });
}

criterion_group!(benches, validate);
criterion_main!(benches);
