// What an effect throws when it does not call its function: the Python client's
// turnkeeper.agent.effect.errors, in TypeScript.

/** Base of the effect API's own errors. */
export class EffectError extends Error {}

/** The call failed in an earlier execution and its error is recorded: thrown again
 * without calling the function. The first execution threw the function's own error;
 * every later one throws this, with that error's name and message. */
export class EffectFailed extends EffectError {
  readonly effect: string;
  readonly key: string;
  readonly errorType: string;
  readonly errorMessage: string;

  constructor(effect: string, key: string, error: { type?: unknown; message?: unknown }) {
    const errorType = String(error.type ?? "");
    const errorMessage = String(error.message ?? "");
    super(
      `effect ${JSON.stringify(effect)} (key ${key}) failed in an earlier execution and is not called again: ${errorType}: ${errorMessage}`,
    );
    this.name = "EffectFailed";
    this.effect = effect;
    this.key = key;
    this.errorType = errorType;
    this.errorMessage = errorMessage;
  }
}

/** An earlier execution began the call and died before its outcome was recorded, and
 * the effect's policy is `fail`: the turn fails, naming the effect. */
export class EffectUncertain extends EffectError {
  readonly effect: string;
  readonly key: string;
  readonly args: unknown;

  constructor(effect: string, key: string, args: unknown) {
    super(
      `effect ${JSON.stringify(effect)} (key ${key}) may or may not have happened: an earlier execution began it with arguments ${JSON.stringify(args)} and died before its outcome was recorded (policy 'fail'); check the receiver for this key`,
    );
    this.name = "EffectUncertain";
    this.effect = effect;
    this.key = key;
    this.args = args;
  }
}

/** The graph runs in a turn but not with TurnkeeperSaver: there is no ledger. */
export class EffectOutsideTurnkeeperSaver extends EffectError {
  constructor(message: string) {
    super(message);
    this.name = "EffectOutsideTurnkeeperSaver";
  }
}
