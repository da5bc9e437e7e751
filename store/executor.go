package store

import "context"

// Executor is what the store's shared reads and writes run on: the database, where each write is
// a transaction of its own and each read goes to the read pool, or a transaction, where they all
// run inside it. *DB and *Tx both are one (the methods below are written once and embedded in
// both), so a caller that holds either reads and writes the same way.
type Executor interface {
	Batch(ctx context.Context, id int64) (Batch, error)
	BindingByOperation(ctx context.Context, operationID string) (Binding, error)
	Request(ctx context.Context, operationID string) (Request, error)
	Admit(ctx context.Context, a Admission) (bool, error)
	AdvanceBatch(ctx context.Context, s BatchStep) (Batch, []Operation, error)
	Apply(ctx context.Context, a Application) (Request, error)
	RecordApprovalCallback(ctx context.Context, callbackID, operationID, result string) (bool, error)
	Settle(ctx context.Context, s Settlement) (Settled, error)
	Transition(ctx context.Context, cur Request, c Change) (Request, error)
	Tell(ctx context.Context, e Event) (told bool, err error)
	EventByID(ctx context.Context, id string) (Event, error)
}

var (
	_ Executor = (*DB)(nil)
	_ Executor = (*Tx)(nil)
)

// executor runs the Executor's methods on the database (tx nil) or in tx.
type executor struct {
	db *DB
	tx *Tx
}

// q is where a read runs: the transaction, or the database's read pool.
func (e executor) q() queryer {
	if e.tx != nil {
		return e.tx.tx
	}
	return e.db.ro
}

// write runs fn in the transaction, or in a transaction of its own.
func (e executor) write(ctx context.Context, fn func(tx *Tx) error) error {
	if e.tx != nil {
		return fn(e.tx)
	}
	return e.db.InTx(ctx, fn)
}

// inWrite is write for a function with one result.
func inWrite[T any](ctx context.Context, e executor, fn func(tx *Tx) (T, error)) (T, error) {
	var out T
	err := e.write(ctx, func(tx *Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}

// Batch returns batch id (ErrNotFound when unknown).
func (e executor) Batch(ctx context.Context, id int64) (Batch, error) {
	return batchByID(ctx, e.q(), id)
}

// BindingByOperation returns the binding whose current request is operationID.
func (e executor) BindingByOperation(ctx context.Context, operationID string) (Binding, error) {
	return bindingByOperation(ctx, e.q(), operationID)
}

// Request returns the request operationID: its operation and its binding (ErrNotFound).
func (e executor) Request(ctx context.Context, operationID string) (Request, error) {
	return readRequest(ctx, e.q(), operationID)
}

// Admit adds a request to its partition's waiting set and reports whether it was added: false
// means it was already queued (I4: the duplicate key is the answer, not an error).
func (e executor) Admit(ctx context.Context, a Admission) (bool, error) {
	return inWrite(ctx, e, func(tx *Tx) (bool, error) { return tx.admit(ctx, a) })
}

// AdvanceBatch writes one step of a running batch (see Tx.advanceBatch): the batch as written and
// the operations moved.
func (e executor) AdvanceBatch(ctx context.Context, s BatchStep) (Batch, []Operation, error) {
	var b Batch
	var moved []Operation
	err := e.write(ctx, func(tx *Tx) error {
		var err error
		b, moved, err = tx.advanceBatch(ctx, s)
		return err
	})
	if err != nil {
		return Batch{}, nil, err
	}
	return b, moved, nil
}

// Apply writes a new request (see Tx.apply).
func (e executor) Apply(ctx context.Context, a Application) (Request, error) {
	return inWrite(ctx, e, func(tx *Tx) (Request, error) { return tx.apply(ctx, a) })
}

// RecordApprovalCallback records an approval callback by its own id and reports whether it is
// new (false: a duplicate).
func (e executor) RecordApprovalCallback(ctx context.Context, callbackID, operationID, result string) (bool, error) {
	return inWrite(ctx, e, func(tx *Tx) (bool, error) { return tx.recordApprovalCallback(ctx, callbackID, operationID, result) })
}

// Settle ends a batch (see Tx.settle).
func (e executor) Settle(ctx context.Context, s Settlement) (Settled, error) {
	return inWrite(ctx, e, func(tx *Tx) (Settled, error) { return tx.settle(ctx, s) })
}

// Transition moves a request (see Tx.transition).
func (e executor) Transition(ctx context.Context, cur Request, c Change) (Request, error) {
	return inWrite(ctx, e, func(tx *Tx) (Request, error) { return tx.transition(ctx, cur, c) })
}
