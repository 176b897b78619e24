-- Each running service instance's last report of itself, for the console
-- without Prometheus: whether it is ready and what each of its readiness
-- checks (the ones its /readyz runs: Postgres, Kafka, ZooKeeper, Redis,
-- Cassandra, as the service uses them) answered. The api reaches only its
-- own stores; the relays and workers reach Kafka and the prefetchers
-- ZooKeeper, so they report those. Every service writes its own row every
-- ~10 s (package pkg/postgres/instances, the table's one writer), marks it
-- stopped on a graceful stop, and deletes rows not written for a day; a
-- row not written for 30 s is an instance that died or cannot reach
-- Postgres, and the console says so.

-- +goose Up
CREATE TABLE service_instances (
    service     text        NOT NULL, -- api, prefetcher, relay, worker
    instance    text        NOT NULL, -- the instance's own name (worker id, node id, host-pid)
    started_at  timestamptz NOT NULL,
    seen_at     timestamptz NOT NULL, -- the database's clock at the last write
    ready       boolean     NOT NULL, -- every check answered
    stopped     boolean     NOT NULL DEFAULT false, -- stopped gracefully
    checks      jsonb       NOT NULL, -- [{"name","ok","error","ms"}], by name
    PRIMARY KEY (service, instance)
);

-- +goose Down
DROP TABLE service_instances;
