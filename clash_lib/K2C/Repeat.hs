{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Stream repetition: every input beat is output @n@ times in a row. A merge that
broadcasts a per-image gate over a map (squeeze-and-excitation's @(1, 1, C)@
scale, a @(C,)@ vector) ends the gate's branch in @repeatS (SNat \@(H * W))@
before its FIFO, so the gate's one beat per image becomes one beat per position
of the map and the join ("K2C.Branch") pairs beats one for one:

> branches
>     (squeeze |> reduce |> excite |> gate |> repeatS (SNat @16) |> fifo d_merge_0)
>     (fifo d_merge_1)
> |> merge

= Hardware

One register of @BitSize a@ bits holding the beat (no reset: @full@ says
whether it holds one), an @Index n@ counter of the repeats that moved, and the
@full@ flag. No arithmetic.

= Protocol and exact timing

Input ready is @not full@ (registered; independent of the input's valid and
of downstream's ready). The output is valid in every cycle the register is
full, and is the held beat.

* A beat accepted in cycle @t@ is valid as repeat 0 from cycle @t + 1@;
  repeat @k + 1@ is valid from the cycle after repeat @k@ moved.
* Input ready is high again the cycle after repeat @n - 1@ moves: with
  downstream always ready, a beat accepted in cycle @t@ is output in cycles
  @t + 1 .. t + n@ and the next beat can be accepted in cycle @t + n + 1@.

These are the rules of "K2C.Scatter" splitting a vector into @n@ beats, whose
control ('heldFor') it shares.
-}
module K2C.Repeat
  ( repeatS
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Scatter (heldFor)
import K2C.Stream (Stream)

-- | Output each beat @n@ times (see the module header).
repeatS
  :: forall dom n a
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n, NFDataX a)
  => SNat n -> Stream dom a a
repeatS n (input, readyOut) = (output, readyIn)
  where
    (full, accepted, _) = heldFor n (isJust <$> input) readyOut
    readyIn   = not <$> full
    held      = regEn (deepErrorX "repeat: no beat yet") accepted (fromJustX <$> input)
    output    = mux full (Just <$> held) (pure Nothing)
