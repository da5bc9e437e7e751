// The one way the SPA talks to bindery: JSON in, JSON out, errors as ApiError with the
// server's code (docs/api.md, 'Errors': {code, message, field?, requestId}).

export class ApiError extends Error {
  constructor(status, body, retryAfter) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || (status === 0 ? 'NETWORK' : `HTTP_${status}`);
    this.field = body && body.field;
    this.requestId = body && body.requestId;
    this.loginUrl = (body && body.loginUrl) || null; // UNAUTHENTICATED: where to sign in, when configured
    this.retryAfter = retryAfter || null;
  }
}

/** request sends one API call; resolves to {status, data}, rejects with ApiError. */
export async function request(method, path, body) {
  const init = {method, headers: {Accept: 'application/json'}, credentials: 'same-origin'};
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, {message: 'Network error'});
  }
  let data = null;
  try {
    data = await res.json();
  } catch (e) {
    data = null;
  }
  if (!res.ok) {
    throw new ApiError(res.status, data, res.headers.get('Retry-After'));
  }
  return {status: res.status, data};
}

export const get = async (path) => (await request('GET', path)).data;
export const post = (path, body) => request('POST', path, body === undefined ? {} : body);

/**
 * newOperationId is the idempotency key of one form (docs/api.md, 'Idempotency').
 * crypto.randomUUID exists only in secure contexts; a plain-HTTP deployment falls back to
 * getRandomValues (same format, v4).
 */
export function newOperationId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** qs builds a query string from the non-empty values of params. */
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  const s = p.toString();
  return s ? `?${s}` : '';
}
