package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"bindery/internal/work/service"
)

// httpServer serves HTTP on its bound listener, as a service: Stop stops accepting, then waits
// for the requests in flight (http.Server.Shutdown) and for Serve to return.
type httpServer struct {
	srv *http.Server
	ln  net.Listener
	// failed is told when Serve ends for another reason than the shutdown.
	failed func(error)
	bg     service.Base
}

func (h *httpServer) Start(ctx context.Context) error {
	if _, ok, err := h.bg.StartInit(ctx); !ok {
		return err
	}
	h.bg.Go(func(context.Context) {
		// Serve ends with Shutdown (Stop), not with the context: requests in flight finish.
		if err := h.srv.Serve(h.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.failed(err)
		}
	})
	return nil
}

func (h *httpServer) Stop(ctx context.Context) error {
	h.bg.StopInit()
	return errors.Join(h.srv.Shutdown(ctx), h.bg.Wait(ctx))
}

// named is a service of the app under the name its start and stop are logged with.
type named struct {
	name string
	service.Service
	log *slog.Logger
}

func (n named) Start(ctx context.Context) error {
	if err := n.Service.Start(ctx); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	n.log.Debug("service started", "service", n.name)
	return nil
}

func (n named) Stop(ctx context.Context) error {
	start := time.Now()
	if err := n.Service.Stop(ctx); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	n.log.Info("service stopped", "service", n.name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// start starts s and adds it to the services Close stops. A service that failed to start is
// stopped already (the contract), so it is not added.
func (a *App) start(ctx context.Context, name string, s service.Service) error {
	n := named{name: name, Service: s, log: a.log}
	if err := n.Start(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started = append(a.started, service.Service(n))
	return nil
}

// stopServices stops the started services in the reverse order of their start, within ctx.
func (a *App) stopServices(ctx context.Context) error {
	a.mu.Lock()
	started := a.started
	a.mu.Unlock()
	return service.StopAll(ctx, started...)
}
