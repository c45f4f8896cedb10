// Package group is bloomgate's consumer-group engine, on kafka-go's
// protocol layer: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// OffsetCommit and OffsetFetch sent through a kafka.Transport (which finds
// the group's coordinator). It is used by the dedup stage and the
// repartition hop alike.
//
//	member.go      Member: join, sync, heartbeats, commits; static
//	               membership (KIP-345), cooperative rebalancing (KIP-429)
//	               with eager range as the fallback protocol
//	assign.go      the leader's sticky, balanced assignment
//	committer.go   Committer: the one caller of OffsetCommit, with the
//	               pause and coordinator-contact guards against zombies
//	partitions.go  Partitions: one goroutine per owned partition, started
//	               and stopped as the member's partitions change
//
// Why not kafka-go's ConsumerGroup: it rebalances eagerly only (every
// member change revokes every partition of every member), has no static
// membership, and sends no heartbeats while a member revokes, so a revoke
// had to fit in half a session timeout (docs/worker.md, "Group
// membership").
//
// Cost: a heartbeat per HeartbeatInterval (each preceded by a
// FindCoordinator: kafka-go's Transport does not cache the coordinator), a
// commit per commit interval, an OffsetFetch per partition recovery.
package group
