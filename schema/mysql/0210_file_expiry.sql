-- operation.file_expires_at: the expiry the binding's file in the config repository carries since
-- a renewal rewrote it (NULL: the expiry its grant rendered, the request time plus the target's
-- ttl). A renewal of a target whose file carries the expiry sends the new file through the batch
-- and the train (merge_batch_request action RENEW); the drift round compares the repository
-- with the file rendered with this expiry.
ALTER TABLE operation ADD COLUMN IF NOT EXISTS file_expires_at DATETIME(6) NULL;
