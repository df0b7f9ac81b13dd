package jobs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"
)

// River fetch tuning. River wakes a queue's producer on LISTEN/NOTIFY when a
// job is inserted, but fetches at most once per FetchCooldown; with the
// default 100 ms an event would wait up to 100 ms before dispatch. 5 ms keeps
// the dispatch latency to a few milliseconds while still batching bursts.
// FetchPollInterval is the fallback when a notification is missed (River's
// default is 1 s); 250 ms bounds that case at a cost of four cheap fetch
// queries per second per idle instance.
const (
	FetchCooldown     = 5 * time.Millisecond
	FetchPollInterval = 250 * time.Millisecond
)

// QueueDeliveries is River's queue of webhook attempts (live and
// replayed), apart from the default queue's dispatch: a backlog behind a
// slow receiver, or requests that hang, never delay the journal's
// processing or the live feed.
const QueueDeliveries = "deliveries"

// DefaultDeliveryWorkers: an attempt holds a database connection only for
// its take and its record, so a hundred cost little; at the default
// maxInFlight (4), 25 webhooks whose receivers all hang take them all.
const DefaultDeliveryWorkers = 100

// RiverConfig configures NewRiverClient.
type RiverConfig struct {
	// ID names this client in River's tables (river_leader shows the
	// leader's); empty lets River choose one.
	ID string
	// DispatchInterval is the period of the sweep (DISPATCH_INTERVAL).
	DispatchInterval time.Duration
	// MaxWorkers is how many jobs of the default queue (dispatch, replay
	// batches, the sweep, the prune) run at once in this process.
	MaxWorkers int
	// DeliveryWorkers is how many webhook attempts (queue
	// QueueDeliveries) run at once in this process; 0 means
	// DefaultDeliveryWorkers. A receiver that never answers holds its
	// webhook's maxInFlight of them, never a dispatch worker.
	DeliveryWorkers int
	// Retention is how long River keeps finished jobs (completed,
	// cancelled, discarded) and the prune job keeps delivered delivery
	// records (RETENTION); 0 means DefaultRetention.
	Retention time.Duration
	// Session is where River LISTENs for new jobs and leadership notices
	// when it is not the pool itself: a session pool of its own behind a
	// transaction pooler (DATABASE_DIRECT_URL). nil means the pool.
	Session *pgxpool.Pool
	// PollOnly makes River poll every FetchPollInterval instead of
	// listening: behind a transaction pooler with no session pool.
	PollOnly bool
	Logger   *slog.Logger
	// TracerProvider, when set, traces River's inserts and jobs
	// (RiverTracing); nil: no middleware at all.
	TracerProvider trace.TracerProvider
}

// sessionDriver is River's pgx driver whose LISTEN runs on a session pool
// of its own while every query and transaction goes through the pooler.
type sessionDriver struct {
	*riverpgxv5.Driver
	session *riverpgxv5.Driver
}

func (d sessionDriver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return d.session.GetListener(params)
}

// NewRiverClient returns a River client that works dispatch and deliver
// jobs through d (and makes d enqueue on it), and runs on the cluster's
// leader the periodic sweep (RunOnStart, then every DispatchInterval) and
// the daily prune of delivered delivery records. River itself deletes its
// finished jobs after cfg.Retention. Start it with Start; it can insert
// jobs before that.
func NewRiverClient(pool *pgxpool.Pool, d *Dispatcher, cfg RiverConfig) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &DispatchWorker{Dispatcher: d})
	river.AddWorker(workers, &DeliverWorker{Dispatcher: d})
	river.AddWorker(workers, &ReplayBatchWorker{Dispatcher: d})
	river.AddWorker(workers, &ReplayDeliverWorker{Dispatcher: d})
	river.AddWorker(workers, &SweepWorker{Dispatcher: d, Logger: cfg.Logger})
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	river.AddWorker(workers, &PruneWorker{Pool: pool, Retention: cfg.Retention, Logger: cfg.Logger})
	var driver riverdriver.Driver[pgx.Tx] = riverpgxv5.New(pool)
	if cfg.Session != nil && cfg.Session != pool {
		driver = sessionDriver{Driver: riverpgxv5.New(pool), session: riverpgxv5.New(cfg.Session)}
	}
	if cfg.DeliveryWorkers <= 0 {
		cfg.DeliveryWorkers = DefaultDeliveryWorkers
	}
	middleware := []rivertype.Middleware{&presetJobIDs{}}
	if cfg.TracerProvider != nil {
		middleware = append(middleware, RiverTracing(cfg.TracerProvider))
	}
	client, err := river.NewClient(driver, &river.Config{
		Middleware: middleware,
		ID:         cfg.ID,
		PollOnly:   cfg.PollOnly,
		Logger:     cfg.Logger,
		Workers:    workers,
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: cfg.MaxWorkers},
			QueueDeliveries:    {MaxWorkers: cfg.DeliveryWorkers},
		},
		// A job of a process that was killed stays "running" until rescued;
		// the sweep makes its work anyway (rows, not jobs, hold the state),
		// so an early rescue only tidies up.
		RescueStuckJobsAfter: 5 * time.Minute,
		FetchCooldown:        FetchCooldown,
		FetchPollInterval:    FetchPollInterval,
		// River prunes its own finished jobs; the journal is kept forever.
		CompletedJobRetentionPeriod: cfg.Retention,
		CancelledJobRetentionPeriod: cfg.Retention,
		DiscardedJobRetentionPeriod: cfg.Retention,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(
				river.PeriodicInterval(cfg.DispatchInterval),
				func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
				&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true},
			),
			river.NewPeriodicJob(
				river.PeriodicInterval(pruneInterval),
				func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil },
				&river.PeriodicJobOpts{ID: PruneArgs{}.Kind(), RunOnStart: true},
			),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	d.river = client
	return client, nil
}
