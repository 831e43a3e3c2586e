//! Fair delivery (issue #26), against fake runners on loopback: an organisation whose runners
//! hold every request open is capped per pool and per organisation, and another
//! organisation's command is delivered while it is; a runner that keeps timing out is held by
//! its breaker (its deliveries take no slot), then gets one attempt at a time until it answers
//! in time. The assertions are on what was delivered and what was open at once, not on timings.

use std::time::Duration;

use control_plane::config::ServerConfig;
use control_plane::domain::RetrySchedule;
use uuid::Uuid;

use crate::support::loopback::{Loopback, runner_at, set_url, until};
use crate::support::runner::{fixture_with, submit};
use crate::support::{TestApp, create_pool, sql_one};

/// An organisation of its own with a pool whose one runner is `url`: (tenant, pool).
async fn tenant_at(app: &TestApp, url: &str) -> (crate::support::Tenant, Uuid) {
    let tenant = app.bootstrap().await;
    let pool = create_pool(app, tenant.workspace_id, "runners").await;
    runner_at(app, pool, url).await;
    (tenant, pool)
}

async fn count(app: &TestApp, sql: &'static str, id: Uuid) -> i64 {
    sql_one!(&mut app.db().await, (i64,), sql, id).unwrap().0
}

/// Whether the runner's breaker holds it (open, or half-open with an attempt out).
async fn held(app: &TestApp, runner: Uuid) -> bool {
    let now = chrono::Utc::now();
    let (until,): (Option<chrono::DateTime<chrono::Utc>>,) = sql_one!(
        &mut app.db().await,
        (Option<chrono::DateTime<chrono::Utc>>,),
        "SELECT held_until FROM runners WHERE id = $1",
        runner
    )
    .unwrap();
    until.is_some_and(|t| t > now)
}

/// Attempts recorded as started and not yet answered, of the runner's deliveries.
async fn in_flight(app: &TestApp, runner: Uuid) -> i64 {
    count(
        app,
        "SELECT count(*) FROM webhook_attempts
         WHERE runner_id = $1 AND finished_at IS NULL AND error IS NULL",
        runner,
    )
    .await
}

fn breaker(c: &mut ServerConfig, timeout_ms: u64, after: u32, cool_down_ms: u64) {
    c.delivery_timeout_ms = timeout_ms;
    c.delivery_breaker_after = after;
    c.delivery_breaker_cooldown_ms = cool_down_ms;
    // Failed attempts are due again soon, so held deliveries are due while the breaker holds.
    c.delivery_retry_schedule =
        RetrySchedule::parse("0s,100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms").unwrap();
}

#[tokio::test]
async fn a_hanging_organisation_is_capped_and_another_organisations_command_goes_meanwhile() {
    let (app, attacker, first, runner) = fixture_with(|c| {
        // Without the caps the attacker's queue would take all 8 slots for two minutes.
        c.delivery_concurrency = 8;
        c.delivery_per_pool = 2;
        c.delivery_per_organisation = 3;
        c.delivery_timeout_ms = 120_000;
        c.delivery_breaker_after = 0;
    })
    .await
    .parts();
    let first_runner = Loopback::holding(Some(Duration::from_secs(120))).await;
    let second_runner = Loopback::holding(Some(Duration::from_secs(120))).await;
    set_url(&app, runner.runner_id, &first_runner.url).await;
    let second = create_pool(&app, attacker.workspace_id, "second").await;
    runner_at(&app, second, &second_runner.url).await;
    for i in 0..16 {
        submit(&app, &attacker, if i % 2 == 0 { first } else { second }).await;
    }
    let attacker_open = || first_runner.open() + second_runner.open();
    until("the attacker holds its organisation's cap", async || {
        attacker_open() == 3
    })
    .await;

    let victim_runner = Loopback::holding(None).await;
    let (victim, victim_pool) = tenant_at(&app, &victim_runner.url).await;
    let (_, delivery) = submit(&app, &victim, victim_pool).await;
    until("the victim's command is delivered", async || {
        !victim_runner.received_ids().is_empty()
    })
    .await;
    assert_eq!(victim_runner.received_ids(), vec![delivery.to_string()]);

    // It went while the attacker's attempts were all still open, and no more were sent, by
    // the looks up to one begun after it.
    app.background_pass_after("deliveries", chrono::Utc::now())
        .await;
    let others = count(
        &app,
        "SELECT count(*) FROM webhook_attempts WHERE delivery_id <> $1",
        delivery,
    )
    .await;
    assert_eq!(others, 3, "the attacker's attempts: its organisation's cap");
    assert_eq!(attacker_open(), 3, "the attacker's attempts are still open");
    let sent = first_runner.received_ids().len() + second_runner.received_ids().len();
    assert_eq!(sent, 3, "the organisation's cap: 3 in flight, no more sent");
    assert!(
        first_runner.peak() <= 2 && second_runner.peak() <= 2,
        "the pool cap: {} and {} at once",
        first_runner.peak(),
        second_runner.peak()
    );
    assert_eq!(first_runner.peak() + second_runner.peak(), 3);
}

#[tokio::test]
async fn a_runner_that_keeps_timing_out_is_held_and_its_queue_takes_no_slot() {
    let (app, tenant, pool, runner) = fixture_with(|c| {
        // The pool alone could take every slot.
        c.delivery_concurrency = 4;
        c.delivery_per_pool = 4;
        c.delivery_per_organisation = 4;
        breaker(c, 300, 2, 60_000);
    })
    .await
    .parts();
    let slow = Loopback::holding(Some(Duration::from_secs(2))).await;
    set_url(&app, runner.runner_id, &slow.url).await;
    for _ in 0..8 {
        submit(&app, &tenant, pool).await;
    }
    until("the breaker holds the pool's only runner", async || {
        held(&app, runner.runner_id).await
    })
    .await;
    until("the attempts already out end", async || {
        in_flight(&app, runner.runner_id).await == 0
    })
    .await;
    let sent = slow.received_ids().len();
    assert!(
        sent <= 6,
        "{sent} attempts before the breaker held the runner"
    );

    // Its failed deliveries are due again in 100 ms, and the rest were never sent: none goes
    // while it is held, and another organisation's command finds a slot at once.
    let other = Loopback::holding(None).await;
    let (victim, victim_pool) = tenant_at(&app, &other.url).await;
    let (_, delivery) = submit(&app, &victim, victim_pool).await;
    until(
        "the other organisation's command is delivered",
        async || !other.received_ids().is_empty(),
    )
    .await;
    assert_eq!(other.received_ids(), vec![delivery.to_string()]);
    // A look begun once every one of the pool's deliveries was due found the runner held.
    let (due_by,): (Option<chrono::DateTime<chrono::Utc>>,) = sql_one!(
        &mut app.db().await,
        (Option<chrono::DateTime<chrono::Utc>>,),
        "SELECT max(d.next_attempt_at) FROM webhook_deliveries d
         JOIN runner_commands c ON c.id = d.command_id WHERE c.pool_id = $1",
        pool
    )
    .unwrap();
    let due_by = due_by.expect("the held deliveries are due");
    app.background_pass_after("deliveries", due_by.max(chrono::Utc::now()))
        .await;
    assert_eq!(
        slow.received_ids().len(),
        sent,
        "nothing sent to a held runner"
    );
    assert!(held(&app, runner.runner_id).await);
    let attempts = count(
        &app,
        "SELECT count(*) FROM webhook_attempts WHERE runner_id = $1",
        runner.runner_id,
    )
    .await;
    assert_eq!(attempts, sent as i64);
}

#[tokio::test]
async fn after_the_cool_down_one_attempt_at_a_time_until_the_runner_answers_in_time() {
    let (app, tenant, pool, runner) = fixture_with(|c| {
        c.delivery_per_pool = 4;
        breaker(c, 300, 2, 500);
    })
    .await
    .parts();
    // Held a little past the attempt's timeout, so what is open is what was sent.
    let slow = Loopback::holding(Some(Duration::from_millis(400))).await;
    set_url(&app, runner.runner_id, &slow.url).await;
    let mut deliveries = Vec::new();
    for _ in 0..6 {
        deliveries.push(submit(&app, &tenant, pool).await.1);
    }
    until("the breaker holds the runner", async || {
        held(&app, runner.runner_id).await
    })
    .await;
    until("nothing is open at the runner", async || {
        in_flight(&app, runner.runner_id).await == 0 && slow.open() == 0
    })
    .await;
    slow.reset_peak();
    let tripped = slow.received_ids().len();
    until("two attempts after the cool-downs", async || {
        slow.received_ids().len() >= tripped + 2
    })
    .await;
    assert_eq!(slow.peak(), 1, "half-open: one attempt at a time");

    // The runner answers in time again: the breaker closes and every command goes.
    slow.answer_at_once();
    for delivery in deliveries {
        until("each delivery gets its 2xx", async || {
            let report = app.services.delivery_report(delivery).await.unwrap();
            report
                .attempts
                .last()
                .is_some_and(|a| a.status_code.is_some_and(|s| (200..300).contains(&s)))
        })
        .await;
    }
    let closed = count(
        &app,
        "SELECT count(*) FROM runners
         WHERE id = $1 AND held_until IS NULL AND slow_streak = 0",
        runner.runner_id,
    )
    .await;
    assert_eq!(closed, 1, "the breaker closed");
}
