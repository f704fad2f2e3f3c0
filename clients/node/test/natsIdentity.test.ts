import { describe, expect, it } from "vitest";

import { natsIdentityOf } from "../src/natsIdentity.js";

describe("natsIdentityOf", () => {
  it("derives the NATS user the Python side derives for the same token", () => {
    // python -c "from turnkeeper.nats_identity import identity_of;
    //   i = identity_of('tk-node-cross-check'); print(i.user, i.password, i.inbox_prefix)"
    expect(natsIdentityOf("tk-node-cross-check")).toEqual({
      user: "tk-9lh7BHjsiNFK",
      pass: "zHpRfnfy3Vn5Y7vVJGuIdN6G-gvmUypnNkbPQM_1pCQ",
      inboxPrefix: "_INBOX_9lh7BHjsiNFK",
    });
  });

  it("gives different tokens different users and passwords", () => {
    const a = natsIdentityOf("tk-a");
    const b = natsIdentityOf("tk-b");
    expect(a.user).not.toBe(b.user);
    expect(a.pass).not.toBe(b.pass);
  });
});
