package config

import (
	"fmt"
	"os"
	"regexp"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// WorkerConfig maps the settings to the worker's configuration: the one
// place where `bloomgate run` and the worker meet. It takes the settings as
// they are: both layers share their defaults (Default takes the worker's)
// and their way of saying "no bound" (worker.NoBound), and the worker
// resolves whatever is left unset, e.g. an empty OnMissingKey or
// OnUnwritable and the Owner
// (host/pid). With --repartition the worker reads the repartition topic.
// The error is a TLS, SASL or position setting that Validate would have
// refused.
func (c *Run) WorkerConfig() (worker.Config, error) {
	dialer, err := c.Dialer()
	if err != nil {
		return worker.Config{}, err
	}
	transport, err := c.Transport()
	if err != nil {
		return worker.Config{}, err
	}
	startFrom, seedFrom, err := c.positions()
	if err != nil {
		return worker.Config{}, err
	}
	input := c.Input
	if c.Repartition {
		input = c.RepartitionTopic()
	}
	return worker.Config{
		Brokers: c.Brokers,
		Group:   c.Group,
		Input:   input,
		// The hop creates its topic with --output's partition count.
		InputMadeLikeOutput:    c.Repartition,
		Output:                 c.Output,
		Duplicates:             c.Duplicates,
		DeadLetter:             c.DeadLetter,
		OnMissingKey:           worker.MissingKeyPolicy(c.OnMissingKey),
		OnUnwritable:           worker.UnwritablePolicy(c.OnUnwritable),
		Agreement:              c.Agreement(),
		Filter:                 c.Params,
		Partitioning:           worker.Partitioning(c.Partitioning),
		Compression:            c.Compression,
		IsolationLevel:         worker.IsolationLevel(c.IsolationLevel),
		StartFrom:              startFrom,
		SeedFrom:               seedFrom,
		SeedTopic:              c.SeedTopic,
		CheckpointInterval:     c.CheckpointInterval,
		MaxCheckpointStaleness: c.MaxCheckpointStaleness,
		OnRestoreFailure:       worker.RestorePolicy(c.OnRestoreFailure),
		MaxReplay:              c.MaxReplay,
		BatchSize:              c.BatchSize,
		MaxBatchBytes:          c.MaxBatchBytes,
		BatchTimeout:           c.BatchTimeout,
		CommitInterval:         c.CommitInterval,
		WriteTimeout:           c.WriteTimeout,
		ShutdownTimeout:        c.ShutdownTimeout,
		SessionTimeout:         c.SessionTimeout,
		HeartbeatInterval:      c.HeartbeatInterval,
		RebalanceTimeout:       c.RebalanceTimeout,
		JoinGroupBackoff:       c.JoinGroupBackoff,
		InstanceID:             c.InstanceID(),
		Dialer:                 dialer,
		Transport:              transport,
		SASLUsername:           c.SASL.Username,
	}, nil
}

// positions maps --start-from and --seed-from ("": no seeding).
func (c *Run) positions() (start worker.Position, seed *worker.Position, err error) {
	if start, err = ParsePosition(c.StartFrom); err != nil {
		return start, nil, fmt.Errorf("start-from: %w", err)
	}
	if c.SeedFrom == "" {
		return start, nil, nil
	}
	s, err := ParsePosition(c.SeedFrom)
	if err != nil {
		return start, nil, fmt.Errorf("seed-from: %w", err)
	}
	return start, &s, nil
}

// statefulSetName matches a StatefulSet pod's name (NAME-ORDINAL), which a
// restarted pod keeps; a Deployment's pods get new random suffixes.
var statefulSetName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?-[0-9]+$`)

// InstanceID resolves --group-instance-id: the static member id, or ""
// for a dynamic member.
func (c *Run) InstanceID() string {
	switch c.GroupInstanceID {
	case "none", "":
		return ""
	case "auto":
		// A pod name is certain only inside Kubernetes: POD_NAME, which
		// the manifests set from the downward API, or HOSTNAME where the
		// kubelet set KUBERNETES_SERVICE_HOST. Elsewhere a HOSTNAME that
		// looks like a pod's (containers or VMs named dedup-1) would make
		// workers on several hosts one static member that fences itself.
		if v := os.Getenv("POD_NAME"); statefulSetName.MatchString(v) {
			return v
		}
		if v := os.Getenv("HOSTNAME"); os.Getenv("KUBERNETES_SERVICE_HOST") != "" && statefulSetName.MatchString(v) {
			return v
		}
		return ""
	}
	return c.GroupInstanceID
}

// RepartitionCompression is the codec of the repartition hop's writes
// (repartition.Config.Compression): "" for input (each batch with its
// input batch's codec, as the dedup stage's), else --compression.
func (c *Run) RepartitionCompression() string {
	if c.Compression == worker.CompressionInput {
		return ""
	}
	return c.Compression
}
