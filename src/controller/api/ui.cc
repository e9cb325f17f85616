// The dashboard's routes (dashboard.h): they answer anyone and check what they are given.
#include "controller/api/handlers.h"
#include "controller/dashboard.h"

namespace gpupool::controller::api {

net::HttpResponse ServeDashboardAsset(const ApiContext& ctx, const Call& c) {
  return ctx.dashboard->ServeAsset(c.r);
}

net::HttpResponse DashboardLogin(const ApiContext& ctx, const Call& c) {
  return ctx.dashboard->Login(c.r);
}

net::HttpResponse DashboardLogout(const ApiContext& ctx, const Call& c) {
  return ctx.dashboard->Logout(c.r);
}

net::HttpResponse DashboardSession(const ApiContext& ctx, const Call& c) {
  return ctx.dashboard->Session(c.r);
}

}  // namespace gpupool::controller::api
