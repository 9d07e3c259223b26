// Command go-election-subject is a subject of opconform's conformance table: a manager that
// only elects a leader with the Go libraries operator authors use, the way a kubebuilder
// main wires them, and whose leader writes a ConfigMap as its work.
//
//   - --election=lease: controller-runtime's manager election (client-go's LeaderElector on
//     a coordination.k8s.io Lease). The leader gauge is the one client-go reports through
//     controller-runtime's metrics registry; nothing here sets it.
//   - --election=for-life: operator-lib's leader.Become (a ConfigMap owned by the Pod), then
//     the manager without election. operator-lib has no gauge: this command sets the
//     registry's leader_election_master_status{name=<lock>} to 0 while Become waits and to 1
//     once it returned.
//
// The leader's work, a Runnable that needs leader election, applies the ConfigMap
// <lock>-work with {holder: <pod>, at: <RFC3339Nano>} every --work-interval.
//
// Exit codes: 0 after SIGTERM once the manager stopped, 1 when the manager fails (and when
// leadership is lost: controller-runtime ends Start with "leader election lost"), 2 on a
// bad flag or environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/operator-framework/operator-lib/leader"
	"github.com/prometheus/client_golang/prometheus"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	// fieldOwner is the field manager of the work ConfigMap's server-side applies.
	fieldOwner = "go-election-subject"
	// leaderGaugeHelp is the help of controller-runtime's leader gauge, word for word: a
	// collector must describe the metric exactly as the registered one does to be handed it.
	leaderGaugeHelp = "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name."
)

var setupLog = ctrl.Log.WithName("setup")

// options are the command's flags.
type options struct {
	election        string
	namespace       string
	lockName        string
	leaseDuration   time.Duration
	renewDeadline   time.Duration
	retryPeriod     time.Duration
	releaseOnCancel bool
	metricsAddr     string
	workInterval    time.Duration
	watchNamespaces string
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-election-subject: %v\n", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(false)))

	ctx := ctrl.SetupSignalHandler()
	cfg := ctrl.GetConfigOrDie()
	mgr, err := newManager(cfg, opts)
	if err != nil {
		setupLog.Error(err, "unable to set up the manager")
		os.Exit(1)
	}
	setupLog.Info("starting manager", "election", opts.election, "lock", opts.lockName,
		"namespace", opts.namespace, "watchNamespaces", opts.watchNamespaces)
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	flags := flag.NewFlagSet("go-election-subject", flag.ExitOnError)
	flags.StringVar(&o.election, "election", "lease",
		"how the leader is elected: lease (controller-runtime) or for-life (operator-lib)")
	flags.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"),
		"the namespace of the lock and the work ConfigMap (default: $POD_NAMESPACE)")
	flags.StringVar(&o.lockName, "lock-name", "go-election-subject-lock",
		"the lock's name: the Lease (lease) or ConfigMap (for-life); the work ConfigMap is <lock-name>-work")
	flags.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "lease: LeaseDuration")
	flags.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "lease: RenewDeadline")
	flags.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "lease: RetryPeriod")
	flags.BoolVar(&o.releaseOnCancel, "release-on-cancel", false,
		"lease: LeaderElectionReleaseOnCancel (give the Lease up on SIGTERM)")
	flags.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080",
		"where controller-runtime serves /metrics (and /healthz)")
	flags.DurationVar(&o.workInterval, "work-interval", 500*time.Millisecond,
		"how often the leader writes its work ConfigMap")
	flags.StringVar(&o.watchNamespaces, "watch-namespace", "",
		"the namespaces a harness confines the operator to on a shared cluster (comma-separated); "+
			"the subject watches only its lock and writes only in its own namespace, so it needs nothing more")
	if err := flags.Parse(args); err != nil {
		return o, err
	}
	switch {
	case flags.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments: %q", flags.Args())
	case o.election != "lease" && o.election != "for-life":
		return o, fmt.Errorf("--election: expected lease or for-life, not %q", o.election)
	case o.namespace == "":
		return o, errors.New("no namespace: set POD_NAMESPACE or --namespace")
	case o.lockName == "":
		return o, errors.New("--lock-name must not be empty")
	case o.workInterval <= 0:
		return o, errors.New("--work-interval must be positive")
	}
	return o, nil
}

// newManager builds the manager of the chosen mode, with the work Runnable added.
func newManager(cfg *rest.Config, o options) (manager.Manager, error) {
	mopts := ctrl.Options{
		Metrics: metricsserver.Options{
			BindAddress:   o.metricsAddr,
			ExtraHandlers: map[string]http.Handler{"/healthz": healthz.CheckHandler{Checker: healthz.Ping}},
		},
	}
	// A pod's host name is its name.
	holder, _ := os.Hostname()
	work := &workRunnable{
		namespace: o.namespace,
		name:      o.lockName + "-work",
		holder:    holder,
		interval:  o.workInterval,
	}

	if o.election == "for-life" {
		gauge, err := leaderGauge(o.lockName)
		if err != nil {
			return nil, err
		}
		gauge.Set(0)
		mopts.LeaderElection = false
		mgr, err := ctrl.NewManager(cfg, mopts)
		if err != nil {
			return nil, err
		}
		elected := make(chan struct{})
		work.client, work.after = mgr.GetClient(), elected
		if err := mgr.Add(&becomeRunnable{lockName: o.lockName, gauge: gauge, elected: elected}); err != nil {
			return nil, err
		}
		return mgr, mgr.Add(work)
	}

	mopts.LeaderElection = true
	mopts.LeaderElectionID = o.lockName // also the gauge's name label
	mopts.LeaderElectionNamespace = o.namespace
	mopts.LeaderElectionResourceLock = resourcelock.LeasesResourceLock
	mopts.LeaseDuration = &o.leaseDuration
	mopts.RenewDeadline = &o.renewDeadline
	mopts.RetryPeriod = &o.retryPeriod
	mopts.LeaderElectionReleaseOnCancel = o.releaseOnCancel
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, err
	}
	work.client = mgr.GetClient()
	return mgr, mgr.Add(work)
}

// leaderGauge is controller-runtime's own leader_election_master_status series for lock:
// registering a gauge described the same way hands back the one already registered.
func leaderGauge(lock string) (prometheus.Gauge, error) {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: leaderGaugeHelp,
	}, []string{"name"})
	if err := metrics.Registry.Register(vec); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			return nil, fmt.Errorf("registering the leader gauge: %w", err)
		}
		existing, ok := already.ExistingCollector.(*prometheus.GaugeVec)
		if !ok {
			return nil, fmt.Errorf("the registered leader gauge is a %T", already.ExistingCollector)
		}
		vec = existing
	}
	return vec.WithLabelValues(lock), nil
}

// becomeRunnable is leader-for-life: it waits in leader.Become (with its own client from
// KUBECONFIG or the in-cluster config, as Become does by default) and then lets the work
// start. It does not need leader election, so it runs as soon as the manager starts and
// /metrics serves the gauge's 0 while it waits.
type becomeRunnable struct {
	lockName string
	gauge    prometheus.Gauge
	elected  chan<- struct{}
}

func (b *becomeRunnable) NeedLeaderElection() bool { return false }

func (b *becomeRunnable) Start(ctx context.Context) error {
	if err := leader.Become(ctx, b.lockName); err != nil {
		if ctx.Err() != nil {
			return nil // SIGTERM while waiting
		}
		return fmt.Errorf("becoming the leader: %w", err)
	}
	// Leader for life: the gauge stays 1 until the process ends, as the lock stays the
	// Pod's until the Pod is deleted.
	b.gauge.Set(1)
	close(b.elected)
	return nil
}

// workRunnable is the leader's work: it applies the ConfigMap <lock>-work every interval
// while it runs. It needs leader election (the default for a Runnable), and in for-life
// mode also waits for after.
type workRunnable struct {
	client    client.Client
	namespace string
	name      string
	holder    string
	interval  time.Duration
	after     <-chan struct{}
}

func (w *workRunnable) Start(ctx context.Context) error {
	if w.after != nil {
		select {
		case <-w.after:
		case <-ctx.Done():
			return nil
		}
	}
	log := ctrl.Log.WithName("work")
	log.Info("leading: writing the work ConfigMap", "configMap", w.name, "every", w.interval.String())
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		cm := corev1ac.ConfigMap(w.name, w.namespace).WithData(map[string]string{
			"holder": w.holder,
			"at":     time.Now().UTC().Format(time.RFC3339Nano),
		})
		err := w.client.Apply(ctx, cm, client.FieldOwner(fieldOwner), client.ForceOwnership)
		if err != nil && ctx.Err() == nil {
			log.Error(err, "writing the work ConfigMap", "configMap", w.name)
		}
		select {
		case <-ctx.Done():
			log.Info("stopped writing the work ConfigMap")
			return nil
		case <-ticker.C:
		}
	}
}
