//! A bounded queue in front of a background writer, for records a request leaves behind but
//! must never wait for (the policy decision log, tokens' last use). What a request hands over
//! is offered with `try_send`: a full queue drops it and counts it, so a slow store costs
//! records, never latency. One task per process drains the queue in batches and stops when the
//! queue's owner is dropped.

use std::time::Duration;

use prometheus::IntCounter;
use tokio::sync::mpsc;

/// What the draining task does with what it takes off the queue.
#[async_trait::async_trait]
pub trait BatchWriter<T: Send + 'static>: Send + 'static {
    /// Writes one batch, at most [`QueueShape::batch`] items; it is cleared afterwards.
    async fn write(&mut self, batch: &mut Vec<T>);
    /// Runs after each batch, and every [`QueueShape::tick`] while nothing arrives.
    async fn after(&mut self) {}
}

/// How much may wait, how much is written at once, and how often [`BatchWriter::after`] runs
/// when idle (`None`: only after a batch).
#[derive(Debug, Clone, Copy)]
pub struct QueueShape {
    pub capacity: usize,
    pub batch: usize,
    pub tick: Option<Duration>,
}

/// The sending side; dropping it ends the writer once the queue is drained.
pub struct BatchQueue<T> {
    sender: mpsc::Sender<T>,
    dropped: IntCounter,
}

impl<T: Send + 'static> BatchQueue<T> {
    /// Starts the writer task; `dropped` counts what a full queue refused.
    pub fn start(shape: QueueShape, dropped: IntCounter, writer: impl BatchWriter<T>) -> Self {
        let (sender, receiver) = mpsc::channel(shape.capacity);
        tokio::spawn(drain(receiver, shape, writer));
        Self { sender, dropped }
    }

    /// Hands `item` to the writer. Never waits and never fails: at worst it is dropped.
    pub fn offer(&self, item: T) {
        if self.sender.try_send(item).is_err() {
            self.dropped.inc();
        }
    }
}

async fn drain<T: Send + 'static>(
    mut receiver: mpsc::Receiver<T>,
    shape: QueueShape,
    mut writer: impl BatchWriter<T>,
) {
    let mut batch = Vec::with_capacity(shape.batch);
    loop {
        let received = match shape.tick {
            Some(tick) => tokio::time::timeout(tick, receiver.recv_many(&mut batch, shape.batch))
                .await
                .ok(),
            None => Some(receiver.recv_many(&mut batch, shape.batch).await),
        };
        match received {
            // Every sender is gone.
            Some(0) => return,
            Some(_) => {
                writer.write(&mut batch).await;
                batch.clear();
            }
            None => {}
        }
        writer.after().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    struct Collect(Arc<Mutex<Vec<usize>>>);

    #[async_trait::async_trait]
    impl BatchWriter<u32> for Collect {
        async fn write(&mut self, batch: &mut Vec<u32>) {
            self.0.lock().unwrap().push(batch.len());
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_the_rest_is_written_in_batches() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let dropped = IntCounter::new("dropped", "dropped").unwrap();
        let shape = QueueShape {
            capacity: 5,
            batch: 2,
            tick: None,
        };
        let queue = BatchQueue::start(shape, dropped.clone(), Collect(sizes.clone()));
        // The current-thread runtime runs the writer only when this task yields: all seven are
        // offered to a queue of five first.
        for n in 0..7 {
            queue.offer(n);
        }
        assert_eq!(dropped.get(), 2);
        drop(queue);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*sizes.lock().unwrap(), vec![2, 2, 1]);
    }
}
