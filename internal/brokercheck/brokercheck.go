// Package brokercheck tells the failures to reach Kafka that waiting does
// not fix from those that pass, and words them naming the settings to
// change. Every component that talks to brokers at start-up (the worker,
// the repartition hop, loadgen) goes through it:
//
//   - authentication failures (a wrong password or user, error 58; an
//     unsupported mechanism; an illegal SASL state, which a listener
//     without SASL answers) are not retried: each
//     failed login counts towards an account lockout where the brokers'
//     identity provider has one, and the error names --sasl-mechanism,
//     --sasl-username and where the password comes from;
//   - authorization failures (error 29, 30, 31, 53, or a topic whose ACLs
//     lack an operation the component needs) are not retried either, and
//     the error names the principal, the resource, the operation and a
//     kafka-acls.sh line that grants it;
//   - a TLS mismatch (a TLS client at a plaintext listener or the reverse)
//     or an untrusted broker certificate fails as soon as it is recognized,
//     with a hint; a connection that is only refused, reset or silent is
//     retried for StartupBound, as a broker restarting looks like that.
//
// Topics asks the brokers about topics over a connection of its own, so
// that a topic the client may not describe reads as forbidden rather than
// missing, and with the operations the client may perform on it (KIP-430).
// Cost: one connection per call, closed at its end.
package brokercheck

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/saslauth"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// PasswordSource is where the SASL password comes from, as messages name it.
const PasswordSource = "BLOOMGATE_SASL_PASSWORD (or --sasl-password)"

// Client is how a component connects to the brokers and what it needs from
// them.
type Client struct {
	Brokers []string
	TLS     *tls.Config    // nil: plaintext
	SASL    sasl.Mechanism // nil: no SASL
	// Bound is how long Retry retries brokers that do not answer (0:
	// StartupBound): `bloomgate check` asks for less, someone waits.
	Bound time.Duration
	// Username is the SASL user name (kafka-go's SCRAM mechanism does not
	// expose it), for messages.
	Username string
	// Component names the component in messages ("the worker").
	Component string
	// Needs are the ACLs the component needs, for authorization messages.
	Needs []Need
	// DialTimeout bounds opening one connection (TCP, TLS, first request,
	// SASL); default 10s.
	DialTimeout time.Duration
}

func (c *Client) dialTimeout() time.Duration {
	if c.DialTimeout > 0 {
		return c.DialTimeout
	}
	return 10 * time.Second
}

// requestTimeout bounds one request when the caller's context has no
// deadline.
func (c *Client) requestTimeout() time.Duration { return 30 * time.Second }

// Op is an ACL operation; its value is Kafka's code, which is also its bit
// in KIP-430's authorized-operations sets.
type Op int8

// The operations the components need.
const (
	Read     Op = 3
	Write    Op = 4
	Create   Op = 5
	Describe Op = 8
)

func (o Op) String() string {
	switch o {
	case Read:
		return "READ"
	case Write:
		return "WRITE"
	case Create:
		return "CREATE"
	case Describe:
		return "DESCRIBE"
	}
	return fmt.Sprintf("operation %d", int8(o))
}

// Resource is an ACL resource type.
type Resource string

const (
	TopicResource   Resource = "topic"
	GroupResource   Resource = "group"
	ClusterResource Resource = "cluster"
)

// Need is an ACL a component needs.
type Need struct {
	Resource Resource
	Name     string // topic or group name; empty for the cluster
	Setting  string // the setting that names it, e.g. "--input"; may be empty
	Op       Op
	// Unless says when the ACL is not needed, e.g. "the topic exists".
	Unless string
}

func (n Need) String() string { return describeNeed(n, n.Op.String()) }

func describeNeed(n Need, ops string) string {
	s := fmt.Sprintf("%s on %s %q", ops, n.Resource, n.Name)
	if n.Resource == ClusterResource {
		s = fmt.Sprintf("%s on the cluster", ops)
	}
	if n.Setting != "" {
		s += " (" + n.Setting + ")"
	}
	if n.Unless != "" {
		s += ", unless " + n.Unless
	}
	return s
}

// describeNeeds lists needs, the operations on one resource together.
func describeNeeds(needs []Need) string {
	type key struct {
		r             Resource
		name, setting string
		unless        string
	}
	var order []key
	ops := map[key][]string{}
	first := map[key]Need{}
	for _, n := range needs {
		k := key{n.Resource, n.Name, n.Setting, n.Unless}
		if _, ok := ops[k]; !ok {
			order = append(order, k)
			first[k] = n
		}
		ops[k] = append(ops[k], n.Op.String())
	}
	list := make([]string, len(order))
	for i, k := range order {
		list[i] = describeNeed(first[k], strings.Join(ops[k], " and "))
	}
	return strings.Join(list, ", ")
}

// Kind is what has to change for a failure to go away.
type Kind int

const (
	// Authentication: the credentials or the SASL mechanism.
	Authentication Kind = iota + 1
	// Authorization: the brokers' ACLs for the principal.
	Authorization
	// TLS: the TLS settings, or the port.
	TLS
	// SASLRequired: the listener requires SASL and none is set.
	SASLRequired
)

func (k Kind) String() string {
	switch k {
	case Authentication:
		return "authentication"
	case Authorization:
		return "authorization"
	case TLS:
		return "tls"
	case SASLRequired:
		return "sasl required"
	}
	return "unknown"
}

// Error is a failure that waiting does not fix. Its message names the
// settings to change; it wraps the client's error.
type Error struct {
	Kind Kind
	// Attempts are the start-up attempts made before giving up (0: the
	// failure came at runtime).
	Attempts int
	msg      string
	err      error
}

func (e *Error) Error() string {
	if e.Attempts == 0 {
		return e.msg
	}
	why := "waiting does not change credentials, ACLs, TLS or SASL settings"
	if e.Kind == Authentication {
		why = "failed logins are not repeated, as they count towards an account lockout"
	}
	noun := "attempts"
	if e.Attempts == 1 {
		noun = "attempt"
	}
	return fmt.Sprintf("%s (gave up after %d %s: %s)", e.msg, e.Attempts, noun, why)
}

func (e *Error) Unwrap() error { return e.err }

// Explain returns err as an *Error when waiting would not fix it, worded
// for the user; nil otherwise (a broker restarting, a network failure).
// It looks at err only; Retry also probes the broker to recognize a TLS
// mismatch.
func (c *Client) Explain(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return c.explain(err)
}

func (c *Client) explain(err error) *Error {
	var we kafka.WriteErrors // one error per message, without Unwrap
	if errors.As(err, &we) {
		for _, e := range we {
			if x := c.explain(e); e != nil && x != nil {
				x.err = err
				return x
			}
		}
	}
	var se *saslauth.Error
	if errors.As(err, &se) {
		// The mechanism could not get credentials with its settings (a
		// refused client secret, a missing token file, no AWS credentials).
		return &Error{Kind: Authentication, err: err, msg: fmt.Sprintf(
			"--sasl-mechanism %s: no credentials for the brokers: %v", c.mechanism(), se)}
	}
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return c.explainTLS(err)
	}
	switch ke {
	case kafka.SASLAuthenticationFailed:
		return &Error{Kind: Authentication, err: err, msg: c.authenticationFailed(err)}
	case kafka.IllegalSASLState:
		// What a Kafka listener without SASL answers a SaslHandshake with.
		return &Error{Kind: Authentication, err: err, msg: fmt.Sprintf(
			"--sasl-mechanism %s: the brokers refused the SASL exchange (%v); their listener may not expect SASL: "+
				"drop --sasl-mechanism or use the brokers' SASL port", c.mechanism(), unwrapStep(err))}
	case kafka.UnsupportedSASLMechanism:
		port := "check the port"
		if c.SASL != nil && c.SASL.Name() == saslauth.MechanismAWSMSKIAM {
			port = "check the port (MSK serves IAM on 9098, SCRAM on 9096)"
		}
		return &Error{Kind: Authentication, err: err, msg: fmt.Sprintf(
			"--sasl-mechanism %s: the brokers do not offer this mechanism on this listener (%v); "+
				"use one they enable (their sasl.enabled.mechanisms), or %s", c.mechanism(), err, port)}
	case kafka.TopicAuthorizationFailed:
		return c.denied(err, TopicResource, "a topic")
	case kafka.GroupAuthorizationFailed:
		return c.denied(err, GroupResource, "a consumer group")
	case kafka.ClusterAuthorizationFailed:
		return c.denied(err, ClusterResource, "a cluster operation")
	case kafka.TransactionalIDAuthorizationFailed:
		return &Error{Kind: Authorization, err: err, msg: fmt.Sprintf(
			"%s was refused a transactional ID (%v), although %s uses no transactions; check the brokers' ACLs for it",
			c.principal(), err, c.component())}
	}
	return nil
}

// mechanism is the SASL mechanism as --sasl-mechanism spells it.
func (c *Client) mechanism() string {
	if c.SASL == nil {
		return "(none)"
	}
	return strings.ToLower(strings.ReplaceAll(c.SASL.Name(), "_", "-"))
}

// described is a mechanism whose credentials come from settings other than
// a user name and a password (saslauth's).
type described interface{ Describe() string }

func (c *Client) authenticationFailed(err error) string {
	if d, ok := c.SASL.(described); ok {
		hint := "check that the token is meant for these brokers (issuer, audience, scope) and that they trust its issuer"
		if c.SASL.Name() == saslauth.MechanismAWSMSKIAM {
			hint = "check that the AWS credentials the SDK found belong to an identity whose IAM policy allows " +
				"kafka-cluster:Connect on this cluster, and the region"
		}
		return fmt.Sprintf("--sasl-mechanism %s with %s: the brokers refused the login (%v); %s",
			c.mechanism(), d.Describe(), unwrapStep(err), hint)
	}
	return fmt.Sprintf("--sasl-username %q with --sasl-mechanism %s: the brokers refused the login (%v); "+
		"check the user name, the password in %s, and that the brokers have this user for %s",
		c.Username, c.mechanism(), unwrapStep(err), PasswordSource, c.mechanism())
}

// principal names who the brokers see, as ACLs name it.
func (c *Client) principal() string {
	switch {
	case c.SASL != nil && c.SASL.Name() == saslauth.MechanismAWSMSKIAM:
		return "the IAM identity of the AWS credentials (MSK authorizes it by IAM policy, kafka-cluster:* actions)"
	case c.SASL != nil && c.SASL.Name() == saslauth.MechanismOAuthBearer:
		if p := c.principalName(); p != "" {
			return fmt.Sprintf("principal %s (the token's sub claim, unless the brokers take another claim)", p)
		}
		return "the principal of the token (its sub claim, unless the brokers take another claim)"
	case c.SASL != nil:
		return fmt.Sprintf("principal User:%s (--sasl-username)", c.Username)
	case c.TLS != nil && len(c.TLS.Certificates) > 0:
		if p := certPrincipal(c.TLS.Certificates[0]); p != "" {
			return fmt.Sprintf("principal %s (the subject of --tls-cert-file, unless the brokers map it with ssl.principal.mapping.rules)", p)
		}
		return "the principal of the client certificate (--tls-cert-file)"
	}
	return "principal User:ANONYMOUS (no --sasl-mechanism)"
}

// principalName is the principal for kafka-acls.sh, "" if unknown.
func (c *Client) principalName() string {
	switch {
	case c.SASL != nil && c.SASL.Name() == saslauth.MechanismAWSMSKIAM:
		return ""
	case c.SASL != nil && c.SASL.Name() == saslauth.MechanismOAuthBearer:
		if p, ok := c.SASL.(interface{ Subject() string }); ok && p.Subject() != "" {
			return "User:" + p.Subject()
		}
		return ""
	case c.SASL != nil:
		return "User:" + c.Username
	case c.TLS != nil && len(c.TLS.Certificates) > 0:
		return certPrincipal(c.TLS.Certificates[0])
	}
	return "User:ANONYMOUS"
}

func certPrincipal(cert tls.Certificate) string {
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	if leaf == nil {
		return ""
	}
	return "User:" + leaf.Subject.String()
}

func (c *Client) component() string {
	if c.Component == "" {
		return "bloomgate"
	}
	return c.Component
}

// denied words an authorization failure whose resource is known only by
// type: it lists what the component needs of that type.
func (c *Client) denied(err error, r Resource, what string) *Error {
	var needs []Need
	for _, n := range c.Needs {
		if n.Resource == r {
			needs = append(needs, n)
		}
	}
	msg := fmt.Sprintf("%s is not authorized for %s (%v)", c.principal(), what, unwrapStep(err))
	if len(needs) == 0 {
		msg += fmt.Sprintf("; %s needs no such ACL: check the brokers' ACLs for this principal", c.component())
	} else {
		msg += fmt.Sprintf("; %s needs %s: grant what is missing, e.g. %s", c.component(), describeNeeds(needs), c.grant(needs[0]))
	}
	return &Error{Kind: Authorization, err: err, msg: msg}
}

// grant is a kafka-acls.sh command that grants n.
func (c *Client) grant(n Need) string {
	p := c.principalName()
	if p == "" {
		p = "User:<principal>"
	}
	server := "<broker>"
	if len(c.Brokers) > 0 {
		server = c.Brokers[0]
	}
	op := strings.ToUpper(n.Op.String()[:1]) + strings.ToLower(n.Op.String()[1:])
	cmd := fmt.Sprintf("kafka-acls.sh --bootstrap-server %s --add --allow-principal %s --operation %s", server, p, op)
	switch n.Resource {
	case TopicResource:
		cmd += " --topic " + n.Name
	case GroupResource:
		cmd += " --group " + n.Name
	case ClusterResource:
		cmd += " --cluster"
	}
	return cmd
}

// CheckTopics compares what the brokers said about the topics (Topics)
// with the component's topic Needs: a topic the principal may not describe,
// or whose authorized operations lack one it needs, is an *Error naming
// each, with a grant. Missing topics and other topic errors are the
// caller's to report; so are needs that apply only "unless" something.
func (c *Client) CheckTopics(topics []Topic) *Error {
	byName := map[string]Topic{}
	for _, t := range topics {
		byName[t.Name] = t
	}
	var problems []string
	var first *Need
	for i, n := range c.Needs {
		t, ok := byName[n.Name]
		if n.Resource != TopicResource || !ok || n.Unless != "" {
			continue
		}
		setting := ""
		if n.Setting != "" {
			setting = n.Setting + " "
		}
		switch {
		case errors.Is(t.Err, kafka.TopicAuthorizationFailed):
			problems = append(problems, fmt.Sprintf("%stopic %q: %s may not DESCRIBE it (%v); %s needs %s on it",
				setting, n.Name, c.principal(), t.Err, c.component(), n.Op))
		case t.Err != nil:
			continue
		default:
			if allowed, known := t.Allows(n.Op); known && !allowed {
				problems = append(problems, fmt.Sprintf("%stopic %q: %s lacks %s on it, which %s needs",
					setting, n.Name, c.principal(), n.Op, c.component()))
			} else {
				continue
			}
		}
		if first == nil {
			first = &c.Needs[i]
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &Error{Kind: Authorization, err: kafka.TopicAuthorizationFailed, msg: strings.Join(problems, "; ") +
		"; grant what is missing, e.g. " + c.grant(*first)}
}

// unwrapStep drops the step wrapper from err for a message that says more.
func unwrapStep(err error) error {
	var se *stepError
	if errors.As(err, &se) {
		return se.err
	}
	return err
}
