// A real OpenID provider on loopback for tests/test_oidc.py: npm's oidc-provider (9.13.3, installed under
// ~/.cache/hearth/npm by scripts/test-services.sh) with its development login and consent pages, one
// confidential client, and three accounts whose "groups" claim the test maps to Hearth's roles.
// Environment: OIDC_PROVIDER_MODULE (the package's lib/index.js), PORT, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI.
import { pathToFileURL } from "node:url";

const { default: Provider } = await import(pathToFileURL(process.env.OIDC_PROVIDER_MODULE).href);
const port = Number(process.env.PORT);
const groups = { alice: ["hearth-admins"], bob: ["hearth-devs", "everyone"], eve: ["everyone"] };

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [{
    client_id: process.env.CLIENT_ID,
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: [process.env.REDIRECT_URI],
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_post",
  }],
  claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["preferred_username"], groups: ["groups"] },
  scopes: ["openid", "email", "profile", "groups"],
  pkce: { required: () => false },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, email: `${id}@example.test`, email_verified: true, preferred_username: id,
                 groups: groups[id] ?? [] };
      },
    };
  },
});
provider.listen(port, "127.0.0.1", () => console.log(`oidc-provider listening on ${port}`));
