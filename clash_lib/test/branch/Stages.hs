{-# LANGUAGE DataKinds, NoImplicitPrelude, ScopedTypeVariables, TypeApplications,
             FlexibleContexts, TypeOperators, TypeFamilies, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A test-only stream stage with a multi-cycle delay, standing in for a layer
in a branch: it takes one beat when empty (ready = empty, registered),
applies @f@, shows the result from @k@ cycles after it was accepted until it
moves, and is ready again the cycle after it moved. So a beat accepted in
cycle @t@ is valid from @t + k@, and the stage takes at most one beat every
@k + 1@ cycles.
-}
module Stages (hold) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)

hold
  :: forall dom k a b
   . (HiddenClockResetEnable dom, KnownNat k, 1 <= k, NFDataX b)
  => SNat k -> (a -> b) -> Stream dom a b
hold SNat f (input, readyOut) = (output, readyIn)
  where
    full     = register False (accepted .||. (full .&&. (not <$> moved)))
    timer    = register (0 :: Index k) (next <$> accepted <*> full <*> timer)
    readyIn  = not <$> full
    accepted = readyIn .&&. (isJust <$> input)
    valid    = full .&&. ((== 0) <$> timer)
    moved    = valid .&&. readyOut
    value    = delayEn (deepErrorX "hold: empty") accepted (f . fromJustX <$> input)
    output   = mux valid (Just <$> value) (pure Nothing)
    next acc isFull t
      | acc           = maxBound
      | isFull, t > 0 = t - 1
      | otherwise     = t
