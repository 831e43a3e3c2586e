//! A command dispatch: the body the dispatcher sends a runner, and how the runner checks that
//! a signed dispatch is for it ([`verify_webhook`]).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Timestamp;
use super::webhook::{ReceivedWebhook, WebhookKeys, WebhookVerifyError, verify_signature};

/// The `type` of a command dispatch.
pub const DISPATCH_EVENT_TYPE: &str = "runner_command.dispatched";

/// The body of a command dispatch to a runner: what the dispatcher serialises and runners parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchPayload {
    /// [`DISPATCH_EVENT_TYPE`].
    #[serde(rename = "type")]
    pub event_type: String,
    pub timestamp: Timestamp,
    pub data: DispatchData,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchData {
    pub delivery_id: Uuid,
    pub command_id: Uuid,
    pub workspace_id: Uuid,
    pub pool_id: Uuid,
    pub runner_id: Uuid,
    pub command: String,
    pub args: Vec<String>,
    pub environment_id: Option<Uuid>,
    pub timeout_seconds: i32,
    pub deadline_at: Timestamp,
    /// 1 for the first delivery attempt; the `webhook-id` stays the same across attempts.
    pub attempt: u32,
}

/// Verifies a command dispatch for runner `runner_id`: its signature ([`verify_signature`]),
/// then that the body is a dispatch naming that runner. Returns the parsed dispatch.
pub fn verify_webhook(
    webhook: &ReceivedWebhook<'_>,
    keys: &WebhookKeys,
    runner_id: Uuid,
    now: i64,
    tolerance_secs: i64,
) -> Result<DispatchPayload, WebhookVerifyError> {
    verify_signature(webhook, keys, now, tolerance_secs)?;
    let payload: DispatchPayload =
        serde_json::from_slice(webhook.body).map_err(|_| WebhookVerifyError::NotADispatch)?;
    if payload.event_type != DISPATCH_EVENT_TYPE {
        return Err(WebhookVerifyError::NotADispatch);
    }
    if payload.data.runner_id != runner_id {
        return Err(WebhookVerifyError::OtherRunner);
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{RunnerSecret, WebhookSigner};

    const NOW: i64 = 1_700_000_000;

    const DISPATCH_JSON: &str = r#"{"type":"runner_command.dispatched","timestamp":"2026-01-02T03:04:05.000000Z",
            "data":{"deliveryId":"00000000-0000-0000-0000-000000000001",
            "commandId":"00000000-0000-0000-0000-000000000002",
            "workspaceId":"00000000-0000-0000-0000-000000000003",
            "poolId":"00000000-0000-0000-0000-000000000004",
            "runnerId":"00000000-0000-0000-0000-000000000005",
            "command":"echo","args":["a","b"],"environmentId":null,"timeoutSeconds":60,
            "deadlineAt":"2026-01-02T03:05:05.000000Z","attempt":1}}"#;

    #[test]
    fn the_dispatch_payload_reads_the_documented_json() {
        let raw = DISPATCH_JSON;
        let payload: DispatchPayload = serde_json::from_str(raw).unwrap();
        assert_eq!(payload.event_type, DISPATCH_EVENT_TYPE);
        assert_eq!(payload.data.args, ["a", "b"]);
        assert_eq!(payload.data.environment_id, None);
        let back = serde_json::to_value(&payload).unwrap();
        assert_eq!(back["data"]["deadlineAt"], "2026-01-02T03:05:05.000000Z");
        assert_eq!(back["data"]["environmentId"], serde_json::Value::Null);
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(raw).unwrap()
        );
    }

    fn dispatch_for(runner_id: Uuid) -> Vec<u8> {
        let mut payload: DispatchPayload = serde_json::from_str(DISPATCH_JSON).unwrap();
        payload.data.runner_id = runner_id;
        serde_json::to_vec(&payload).unwrap()
    }

    #[test]
    fn a_dispatch_verifies_only_at_the_runner_it_names() {
        let signer = WebhookSigner::from_seeds(&[vec![10; 32]]).unwrap();
        let published = WebhookKeys {
            published: signer.public_keys().into_iter().map(|k| k.key).collect(),
            secrets: vec![],
        };
        let (ours, theirs) = (Uuid::new_v4(), Uuid::new_v4());
        let body = dispatch_for(ours);
        let secret = RunnerSecret::generate();
        let header = signer.sign("d", NOW, &body, std::slice::from_ref(&secret));
        let webhook = ReceivedWebhook {
            id: "d",
            timestamp: "1700000000",
            signature: &header,
            body: &body,
        };
        // With the published key alone (the rule every runner can follow) and with the secret.
        for keys in [
            published.clone(),
            WebhookKeys {
                published: vec![],
                secrets: vec![secret],
            },
        ] {
            let payload = verify_webhook(&webhook, &keys, ours, NOW, 300).unwrap();
            assert_eq!(payload.data.runner_id, ours);
            assert_eq!(
                verify_webhook(&webhook, &keys, theirs, NOW, 300),
                Err(WebhookVerifyError::OtherRunner)
            );
        }
        let header = signer.sign("n", NOW, b"{}", &[]);
        let not_a_dispatch = ReceivedWebhook {
            id: "n",
            timestamp: "1700000000",
            signature: &header,
            body: b"{}",
        };
        assert_eq!(
            verify_webhook(&not_a_dispatch, &published, ours, NOW, 300),
            Err(WebhookVerifyError::NotADispatch)
        );
    }
}
