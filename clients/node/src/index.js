export { DEFAULT_CALL_TIMEOUT_MS, TurnkeeperClient } from './client.js';
export {
  EXIT_CODES,
  LIVE_STATES,
  TERMINAL_EVENT_TYPES,
  eventFrame,
  followTurn,
  isRetryable,
  resetFrame,
  stateFromWire,
  stateName,
  statusFrame,
} from './follow.js';
export { LOADER_OPTIONS, PROTO_FILES, PROTO_ROOT, loadTurnkeeper } from './proto.js';
export { fromValue, parseDataJson, timestampToIso, toValue } from './values.js';
